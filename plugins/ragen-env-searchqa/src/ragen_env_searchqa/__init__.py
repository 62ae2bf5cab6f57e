"""SearchQA for RAGEN: a search-agent env and the retrieval server it starts (or connects to)."""
