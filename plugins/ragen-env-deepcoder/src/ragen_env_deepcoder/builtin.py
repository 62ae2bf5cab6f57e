"""The built-in problem set: 40 short programming tasks written for this package.

It is the offline default (``dataset: null``), so ``ragen run --env deepcoder`` trains with no
download, and every problem carries a reference solution, so the conformance kit's oracle check
runs. Rows are in the public DeepCoder layouts (the four test formats of
:mod:`ragen_env_deepcoder.problems` all occur), so they go through the same conversion as
downloaded data. Problems 4, 9, 14, ... (every fifth) are the validation split; the rest train.
"""

from __future__ import annotations

from typing import Any

from ragen_env_deepcoder.problems import Problem, problem_from_row


def _io(*pairs: tuple[str, str]) -> list[dict[str, str]]:
    """Codeforces layout: ``[{"input", "output"}]``."""
    return [{"input": i, "output": o} for i, o in pairs]


def _lcb_stdin(*pairs: tuple[str, str]) -> list[dict[str, str]]:
    return [{"input": i, "output": o, "testtype": "stdin"} for i, o in pairs]


def _lcb_call(*pairs: tuple[str, str]) -> list[dict[str, str]]:
    """LiveCodeBench layout: arguments one JSON value per line, the result as JSON."""
    return [{"input": i, "output": o, "testtype": "functional"} for i, o in pairs]


def _pi_stdin(*pairs: tuple[str, str]) -> list[dict[str, str]]:
    return [{"type": "stdin_stdout", "input": i, "output": o} for i, o in pairs]


def _pi_call(name: str, *pairs: tuple[list[Any], Any]) -> list[dict[str, Any]]:
    """PrimeIntellect layout: the argument list and the result as values."""
    return [{"type": "function_call", "fn_name": name, "input": i, "output": o} for i, o in pairs]


def _taco(pairs: list[tuple[Any, Any]], fn_name: str | None = None) -> dict[str, Any]:
    """TACO dict layout (call-based outputs wrapped in a one-element list, as TACO does)."""
    tests: dict[str, Any] = {"inputs": [i for i, _ in pairs], "outputs": [o for _, o in pairs]}
    if fn_name:
        tests["fn_name"] = fn_name
    return tests


ROWS: list[dict[str, Any]] = [
    {  # 0
        "problem": "Read two integers a and b on one line and print their sum.",
        "tests": _io(("3 4\n", "7\n"), ("-5 5\n", "0\n"), ("1000000000 1000000000\n", "2000000000\n")),
        "solution": "a, b = map(int, input().split())\nprint(a + b)\n",
    },
    {  # 1
        "problem": "Read one line of text and print it reversed.",
        "tests": _lcb_stdin(("hello\n", "olleh\n"), ("a\n", "a\n"), ("ab cd\n", "dc ba\n")),
        "solution": "print(input()[::-1])\n",
    },
    {  # 2
        "problem": "Read one line and print how many of its characters are vowels (a, e, i, o, u, either case).",
        "tests": _pi_stdin(("Hello World\n", "3\n"), ("xyz\n", "0\n"), ("AEIOUaeiou\n", "10\n")),
        "solution": "print(sum(ch in 'aeiouAEIOU' for ch in input()))\n",
    },
    {  # 3
        "problem": "The first line holds n, the second n integers. Print the largest of them.",
        "tests": _taco([("3\n1 7 2\n", "7\n"), ("1\n-4\n", "-4\n"), ("5\n-1 -2 -3 -4 -5\n", "-1\n")]),
        "solution": "input()\nprint(max(map(int, input().split())))\n",
    },
    {  # 4 (val)
        "problem": "Read n and print the numbers 1..n, one per line, with Fizz for multiples of 3, Buzz for "
                   "multiples of 5 and FizzBuzz for multiples of both.",
        "tests": _io(("5\n", "1\n2\nFizz\n4\nBuzz\n"), ("1\n", "1\n"),
                     ("15\n", "1\n2\nFizz\n4\nBuzz\nFizz\n7\n8\nFizz\nBuzz\n11\nFizz\n13\n14\nFizzBuzz\n")),
        "solution": "n = int(input())\nfor i in range(1, n + 1):\n"
                    "    print('FizzBuzz' if i % 15 == 0 else 'Fizz' if i % 3 == 0 else 'Buzz' if i % 5 == 0 else i)\n",
    },
    {  # 5
        "problem": "Read n (0 <= n <= 20) and print n! (the product 1 * 2 * ... * n; 0! = 1).",
        "tests": _lcb_stdin(("0\n", "1\n"), ("5\n", "120\n"), ("20\n", "2432902008176640000\n")),
        "solution": "import math\nprint(math.factorial(int(input())))\n",
    },
    {  # 6
        "problem": "Read an integer n (1 <= n <= 10^9). Print YES if n is prime, otherwise NO.",
        "tests": _pi_stdin(("2\n", "YES\n"), ("1\n", "NO\n"), ("97\n", "YES\n"), ("1000000000\n", "NO\n"), ("999999937\n", "YES\n")),
        "solution": "n = int(input())\nok = n > 1\ni = 2\nwhile i * i <= n and ok:\n    ok = n % i != 0\n    i += 1\nprint('YES' if ok else 'NO')\n",
    },
    {  # 7
        "problem": "Fibonacci numbers: F(0) = 0, F(1) = 1, F(k) = F(k-1) + F(k-2). Read n (0 <= n <= 90) and print F(n).",
        "tests": _taco([("0\n", "0\n"), ("1\n", "1\n"), ("10\n", "55\n"), ("90\n", "2880067194370816120\n")]),
        "solution": "a, b = 0, 1\nfor _ in range(int(input())):\n    a, b = b, a + b\nprint(a)\n",
    },
    {  # 8
        "problem": "Read two positive integers on one line and print their greatest common divisor.",
        "tests": _io(("12 18\n", "6\n"), ("7 13\n", "1\n"), ("100 100\n", "100\n")),
        "solution": "import math\na, b = map(int, input().split())\nprint(math.gcd(a, b))\n",
    },
    {  # 9 (val)
        "problem": "Read a word. Print YES if it reads the same forwards and backwards, otherwise NO.",
        "tests": _lcb_stdin(("level\n", "YES\n"), ("ab\n", "NO\n"), ("x\n", "YES\n")),
        "solution": "s = input().strip()\nprint('YES' if s == s[::-1] else 'NO')\n",
    },
    {  # 10
        "problem": "Read a non-negative integer n and print the sum of its decimal digits.",
        "tests": _pi_stdin(("0\n", "0\n"), ("12345\n", "15\n"), ("999999999999\n", "108\n")),
        "solution": "print(sum(int(d) for d in input().strip()))\n",
    },
    {  # 11
        "problem": "Read one line and print how many words it has (words are separated by spaces).",
        "tests": _taco([("the quick brown fox\n", "4\n"), ("one\n", "1\n"), ("  spaced   out  \n", "2\n")]),
        "solution": "print(len(input().split()))\n",
    },
    {  # 12
        "problem": "The first line holds n, the second n integers. Print them in increasing order, separated by spaces.",
        "tests": _io(("4\n3 1 2 1\n", "1 1 2 3\n"), ("1\n5\n", "5\n"), ("3\n-1 10 0\n", "-1 0 10\n")),
        "solution": "input()\nprint(*sorted(map(int, input().split())))\n",
    },
    {  # 13
        "problem": "The first line holds n, the second n integers. Print the smallest and the largest, separated by a space.",
        "tests": _lcb_stdin(("3\n5 1 9\n", "1 9\n"), ("1\n4\n", "4 4\n"), ("4\n-3 -3 -3 -3\n", "-3 -3\n")),
        "solution": "input()\nv = list(map(int, input().split()))\nprint(min(v), max(v))\n",
    },
    {  # 14 (val)
        "problem": "Read n and k. Print how many numbers in 1..n are divisible by k.",
        "tests": _pi_stdin(("10 3\n", "3\n"), ("5 7\n", "0\n"), ("1000000000000 1\n", "1000000000000\n")),
        "solution": "n, k = map(int, input().split())\nprint(n // k)\n",
    },
    {  # 15
        "problem": "Read a non-negative integer n and print it in binary, without leading zeros (0 prints as 0).",
        "tests": _taco([("0\n", "0\n"), ("5\n", "101\n"), ("1024\n", "10000000000\n")]),
        "solution": "print(bin(int(input()))[2:])\n",
    },
    {  # 16
        "problem": "The first line is a string s, the second a single character c. Print how many times c occurs in s.",
        "tests": _io(("banana\na\n", "3\n"), ("banana\nz\n", "0\n"), ("aaaa\na\n", "4\n")),
        "solution": "s = input()\nc = input()\nprint(s.count(c))\n",
    },
    {  # 17
        "problem": "The first line holds n, the second n integers. Print the running sums (the i-th is the sum of "
                   "the first i numbers), separated by spaces.",
        "tests": _lcb_stdin(("4\n1 2 3 4\n", "1 3 6 10\n"), ("1\n-7\n", "-7\n"), ("3\n5 -5 5\n", "5 0 5\n")),
        "solution": "input()\ntotal, out = 0, []\nfor x in map(int, input().split()):\n    total += x\n    out.append(total)\nprint(*out)\n",
    },
    {  # 18
        "problem": "The first line holds r and c, then r lines of c integers each. Print the transposed matrix: c lines of r integers.",
        "tests": _pi_stdin(("2 3\n1 2 3\n4 5 6\n", "1 4\n2 5\n3 6\n"), ("1 1\n7\n", "7\n"), ("3 1\n1\n2\n3\n", "1 2 3\n")),
        "solution": "r, c = map(int, input().split())\nrows = [input().split() for _ in range(r)]\nfor j in range(c):\n"
                    "    print(' '.join(row[j] for row in rows))\n",
    },
    {  # 19 (val)
        "problem": "The first line is a lowercase word, the second an integer k (0 <= k < 26). Shift every letter k "
                   "places forward in the alphabet, wrapping from z to a, and print the result.",
        "tests": _taco([("abc\n1\n", "bcd\n"), ("xyz\n3\n", "abc\n"), ("hello\n0\n", "hello\n")]),
        "solution": "s = input().strip()\nk = int(input())\nprint(''.join(chr((ord(ch) - 97 + k) % 26 + 97) for ch in s))\n",
    },
    {  # 20
        "problem": "Read one line of words separated by spaces. Print the longest word (the first one if several tie).",
        "tests": _io(("I love programming\n", "programming\n"), ("ab cd ef\n", "ab\n"), ("a bb ccc bb\n", "ccc\n")),
        "solution": "words = input().split()\nprint(max(words, key=len))\n",
    },
    {  # 21
        "problem": "The first line holds n, the second n integers. Print how many distinct values there are.",
        "tests": _lcb_stdin(("5\n1 2 2 3 3\n", "3\n"), ("1\n0\n", "1\n"), ("4\n7 7 7 7\n", "1\n")),
        "solution": "input()\nprint(len(set(input().split())))\n",
    },
    {  # 22
        "problem": "Start from a positive integer n. While n is not 1, replace it by n / 2 if it is even and by 3n + 1 "
                   "if it is odd. Print how many replacements it takes to reach 1.",
        "tests": _pi_stdin(("1\n", "0\n"), ("6\n", "8\n"), ("27\n", "111\n")),
        "solution": "n = int(input())\nsteps = 0\nwhile n != 1:\n    n = n // 2 if n % 2 == 0 else 3 * n + 1\n    steps += 1\nprint(steps)\n",
    },
    {  # 23
        "problem": "Read a year. Print YES if it is a leap year in the Gregorian calendar (divisible by 4, except "
                   "centuries not divisible by 400), otherwise NO.",
        "tests": _taco([("2024\n", "YES\n"), ("1900\n", "NO\n"), ("2000\n", "YES\n"), ("2023\n", "NO\n")]),
        "solution": "y = int(input())\nprint('YES' if y % 4 == 0 and (y % 100 != 0 or y % 400 == 0) else 'NO')\n",
    },
    {  # 24 (val)
        "problem": "The first line holds t, the number of test cases; each of the next t lines holds two integers. "
                   "For each test case print the product of its two integers on its own line.",
        "tests": _io(("3\n1 2\n3 4\n-5 6\n", "2\n12\n-30\n"), ("1\n0 99\n", "0\n"), ("2\n100000 100000\n7 7\n", "10000000000\n49\n")),
        "solution": "for _ in range(int(input())):\n    a, b = map(int, input().split())\n    print(a * b)\n",
    },
    {  # 25
        "problem": "Read two words on separate lines. Print YES if one is an anagram of the other (same letters, "
                   "same counts), otherwise NO.",
        "tests": _lcb_stdin(("listen\nsilent\n", "YES\n"), ("abc\nabd\n", "NO\n"), ("aab\nab\n", "NO\n")),
        "solution": "a = input().strip()\nb = input().strip()\nprint('YES' if sorted(a) == sorted(b) else 'NO')\n",
    },
    {  # 26
        "problem": "The first line holds n and k, the second n integers a_1..a_n. Print how many pairs i < j have "
                   "a_i + a_j = k.",
        "tests": _pi_stdin(("4 5\n1 4 2 3\n", "2\n"), ("3 2\n1 1 1\n", "3\n"), ("2 10\n1 2\n", "0\n")),
        "solution": "from collections import Counter\nn, k = map(int, input().split())\nseen = Counter()\npairs = 0\n"
                    "for x in map(int, input().split()):\n    pairs += seen[k - x]\n    seen[x] += 1\nprint(pairs)\n",
    },
    {  # 27
        "problem": "Read a string of brackets ()[]{}. Print YES if every bracket is closed by the matching kind in "
                   "the right order, otherwise NO. The string may be empty.",
        "tests": _taco([("([]{})\n", "YES\n"), ("(]\n", "NO\n"), ("((\n", "NO\n"), ("\n", "YES\n")]),
        "solution": "s = input().strip()\npair = {')': '(', ']': '[', '}': '{'}\nstack = []\nok = True\nfor ch in s:\n"
                    "    if ch in '([{':\n        stack.append(ch)\n    elif not stack or stack.pop() != pair[ch]:\n        ok = False\n"
                    "        break\nprint('YES' if ok and not stack else 'NO')\n",
    },
    {  # 28
        "problem": "Given a list of integers nums and an integer target, return the indices [i, j] (i < j) of the "
                   "two numbers that add up to target. Exactly one such pair exists.",
        "starter_code": "class Solution:\n    def twoSum(self, nums: List[int], target: int) -> List[int]:\n        ",
        "tests": _lcb_call(("[2, 7, 11, 15]\n9", "[0, 1]"), ("[3, 2, 4]\n6", "[1, 2]"), ("[3, 3]\n6", "[0, 1]")),
        "solution": "class Solution:\n    def twoSum(self, nums, target):\n        seen = {}\n        for j, x in enumerate(nums):\n"
                    "            if target - x in seen:\n                return [seen[target - x], j]\n            seen[x] = j\n",
    },
    {  # 29 (val)
        "problem": "Return True if the integer x reads the same forwards and backwards in decimal (negative numbers "
                   "never do), otherwise False.",
        "starter_code": "class Solution:\n    def isPalindrome(self, x: int) -> bool:\n        ",
        "tests": _lcb_call(("121", "true"), ("-121", "false"), ("10", "false"), ("0", "true")),
        "solution": "class Solution:\n    def isPalindrome(self, x):\n        return str(x) == str(x)[::-1]\n",
    },
    {  # 30
        "problem": "Return the largest sum of a non-empty contiguous subarray of nums.",
        "starter_code": "class Solution:\n    def maxSubArray(self, nums: List[int]) -> int:\n        ",
        "tests": _lcb_call(("[-2, 1, -3, 4, -1, 2, 1, -5, 4]", "6"), ("[1]", "1"), ("[-3, -1, -2]", "-1")),
        "solution": "class Solution:\n    def maxSubArray(self, nums):\n        best = cur = nums[0]\n        for x in nums[1:]:\n"
                    "            cur = max(x, cur + x)\n            best = max(best, cur)\n        return best\n",
    },
    {  # 31
        "problem": "Write a function add(a, b) that returns the sum of the numbers a and b.",
        "starter_code": "def add(a, b):\n    ",
        "tests": _taco([([1, 2], [3]), ([-4, 4], [0]), ([10**12, 1], [10**12 + 1])], fn_name="add"),
        "solution": "def add(a, b):\n    return a + b\n",
    },
    {  # 32
        "problem": "Write a function count_evens(nums) that returns how many numbers in the list nums are even.",
        "tests": _pi_call("count_evens", ([[1, 2, 3, 4]], 2), ([[]], 0), ([[0, -2, 5]], 2)),
        "solution": "def count_evens(nums):\n    return sum(1 for x in nums if x % 2 == 0)\n",
    },
    {  # 33
        "problem": "Return the words of the string s in reverse order, joined by single spaces (s may have extra spaces).",
        "starter_code": "class Solution:\n    def reverseWords(self, s: str) -> str:\n        ",
        "tests": _lcb_call(('"the sky is blue"', '"blue is sky the"'), ('"  hello world  "', '"world hello"'), ('"a"', '"a"')),
        "solution": "class Solution:\n    def reverseWords(self, s):\n        return ' '.join(reversed(s.split()))\n",
    },
    {  # 34 (val)
        "problem": "Write a function merge_sorted(a, b) that merges two sorted lists into one sorted list.",
        "tests": _pi_call("merge_sorted", ([[1, 3, 5], [2, 4]], [1, 2, 3, 4, 5]), ([[], [1]], [1]), ([[2, 2], [2]], [2, 2, 2])),
        "solution": "def merge_sorted(a, b):\n    out, i, j = [], 0, 0\n    while i < len(a) and j < len(b):\n"
                    "        if a[i] <= b[j]:\n            out.append(a[i])\n            i += 1\n        else:\n"
                    "            out.append(b[j])\n            j += 1\n    return out + a[i:] + b[j:]\n",
    },
    {  # 35
        "problem": "You climb a staircase of n steps, taking 1 or 2 steps at a time. Return the number of distinct ways "
                   "to reach the top.",
        "starter_code": "class Solution:\n    def climbStairs(self, n: int) -> int:\n        ",
        "tests": _lcb_call(("2", "2"), ("3", "3"), ("10", "89"), ("45", "1836311903")),
        "solution": "class Solution:\n    def climbStairs(self, n):\n        a, b = 1, 1\n        for _ in range(n):\n"
                    "            a, b = b, a + b\n        return a\n",
    },
    {  # 36
        "problem": "Write a function char_counts(s) that returns a dict mapping each character of s to how many times it occurs.",
        "starter_code": "def char_counts(s):\n    ",
        "tests": _taco([(["aab"], [{"a": 2, "b": 1}]), ([""], [{}]), (["xyz"], [{"x": 1, "y": 1, "z": 1}])], fn_name="char_counts"),
        "solution": "def char_counts(s):\n    counts = {}\n    for ch in s:\n        counts[ch] = counts.get(ch, 0) + 1\n    return counts\n",
    },
    {  # 37
        "problem": "nums holds n distinct numbers from 0..n. Return the one number of that range missing from nums.",
        "starter_code": "class Solution:\n    def missingNumber(self, nums: List[int]) -> int:\n        ",
        "tests": _lcb_call(("[3, 0, 1]", "2"), ("[0, 1]", "2"), ("[1]", "0")),
        "solution": "class Solution:\n    def missingNumber(self, nums):\n        n = len(nums)\n        return n * (n + 1) // 2 - sum(nums)\n",
    },
    {  # 38
        "problem": "Write a function is_sorted(nums) that returns True if the list is in non-decreasing order, else False.",
        "tests": _pi_call("is_sorted", ([[1, 2, 2, 5]], True), ([[3, 1]], False), ([[]], True)),
        "solution": "def is_sorted(nums):\n    return all(a <= b for a, b in zip(nums, nums[1:]))\n",
    },
    {  # 39 (val)
        "problem": "Convert a Roman numeral (I, V, X, L, C, D, M, with subtractive pairs such as IV and CM) to an integer.",
        "starter_code": "class Solution:\n    def romanToInt(self, s: str) -> int:\n        ",
        "tests": _lcb_call(('"III"', "3"), ('"LVIII"', "58"), ('"MCMXCIV"', "1994")),
        "solution": "class Solution:\n    def romanToInt(self, s):\n        v = {'I': 1, 'V': 5, 'X': 10, 'L': 50, 'C': 100, 'D': 500, 'M': 1000}\n"
                    "        total = 0\n        for i, ch in enumerate(s):\n            if i + 1 < len(s) and v[ch] < v[s[i + 1]]:\n"
                    "                total -= v[ch]\n            else:\n                total += v[ch]\n        return total\n",
    },
]

#: Every fifth problem is held out for validation.
VAL_EVERY = 5


def builtin_problems(split: str) -> tuple[Problem, ...]:
    """The built-in problems of ``split`` (``"train"`` or ``"val"``)."""
    val = split == "val"
    return tuple(problem_from_row(row, f"builtin/{i}") for i, row in enumerate(ROWS) if (i % VAL_EVERY == VAL_EVERY - 1) == val)
