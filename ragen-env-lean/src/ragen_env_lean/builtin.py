"""The built-in theorem set: short competition-style exercises written for this package.

Used when ``dataset`` is unset (no download). Each statement needs Mathlib (the default imports)
and comes with a known proof, one tactic per entry, that the conformance oracle replays; the
proofs were written against Lean 4 / Mathlib of 2025 (``v4.2x``) and are checked by the
real-Lean tests wherever a toolchain is configured. The last two theorems are the fixed
validation split.
"""

from __future__ import annotations

from functools import lru_cache

from ragen_env_lean.config import DEFAULT_IMPORTS, DEFAULT_PREAMBLE
from ragen_env_lean.statements import Theorem, TheoremSet, make_theorem

#: ``(name, informal statement, formal statement, proof tactics)``
BUILTIN: tuple[tuple[str, str, str, tuple[str, ...]], ...] = (
    ("ragen_add_swap", "Adding two natural numbers in either order gives the same sum.",
     "theorem ragen_add_swap (a b : ℕ) : a + b = b + a := by", ("omega",)),
    ("ragen_double", "For every real x, twice x equals x plus x.",
     "theorem ragen_double (x : ℝ) : 2 * x = x + x := by", ("ring",)),
    ("ragen_linear_eq", "If 3x + 2 = 11 for a real number x, then x = 3.",
     "theorem ragen_linear_eq (x : ℝ) (h₀ : 3 * x + 2 = 11) : x = 3 := by", ("linarith",)),
    ("ragen_mod_five", "If n leaves remainder 3 on division by 5, then 2n leaves remainder 1.",
     "theorem ragen_mod_five (n : ℕ) (h₀ : n % 5 = 3) : 2 * n % 5 = 1 := by", ("omega",)),
    ("ragen_square_nonneg", "The square of the difference of two reals is never negative.",
     "theorem ragen_square_nonneg (a b : ℝ) : 0 ≤ (a - b) ^ 2 := by", ("exact sq_nonneg (a - b)",)),
    ("ragen_eval_poly", "Evaluate x^2 + 3x at x = -2: the value is -2.",
     "theorem ragen_eval_poly (x : ℤ) (h₀ : x = -2) : x ^ 2 + 3 * x = -2 := by", ("subst h₀", "norm_num")),
    ("ragen_gcd", "The greatest common divisor of 12 and 18 is 6.",
     "theorem ragen_gcd : Nat.gcd 12 18 = 6 := by", ("norm_num",)),
    ("ragen_and_swap", "If p and q both hold, then q and p hold.",
     "theorem ragen_and_swap (p q : Prop) (hp : p) (hq : q) : q ∧ p := by", ("constructor", "exact hq", "exact hp")),
    ("ragen_square_lt", "If 0 < a < b for reals a and b, then a^2 < b^2.",
     "theorem ragen_square_lt (a b : ℝ) (h₀ : 0 < a) (h₁ : a < b) : a ^ 2 < b ^ 2 := by", ("nlinarith",)),
    ("ragen_dvd_six", "Every natural number divisible by 6 is divisible by 3.",
     "theorem ragen_dvd_six (n : ℕ) (h₀ : 6 ∣ n) : 3 ∣ n := by", ("exact dvd_trans (by norm_num) h₀",)),
    # validation
    ("ragen_abs_bound", "If |x - 1| < 2 for a real x, then x < 3.",
     "theorem ragen_abs_bound (x : ℝ) (h₀ : |x - 1| < 2) : x < 3 := by", ("have h := (abs_lt.mp h₀).2", "linarith")),
    ("ragen_sum_sq", "If x + y = 5 and xy = 6 for reals x and y, then x^2 + y^2 = 13.",
     "theorem ragen_sum_sq (x y : ℝ) (h₀ : x + y = 5) (h₁ : x * y = 6) : x ^ 2 + y ^ 2 = 13 := by",
     ("linear_combination (x + y + 5) * h₀ - 2 * h₁",)),
)
VAL_COUNT = 2


@lru_cache(maxsize=1)
def builtin_theorems() -> TheoremSet:
    """The built-in theorem set (the last two validate)."""
    theorems: list[Theorem] = [
        make_theorem(name, formal, informal=informal, default_imports=DEFAULT_IMPORTS, default_preamble=DEFAULT_PREAMBLE, proof=proof)
        for name, informal, formal, proof in BUILTIN
    ]
    return TheoremSet(tuple(theorems[:-VAL_COUNT]), tuple(theorems[-VAL_COUNT:]))
