"""WebShop: the WebShop text environment (pages, search, reward) served by envhub."""
