"""`kubectl nimbix`: burst pods, budgets and decisions as the API server holds them."""
