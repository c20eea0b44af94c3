"""Search-QA: Search-R1 style multi-turn question answering over an embedded or remote retriever."""
