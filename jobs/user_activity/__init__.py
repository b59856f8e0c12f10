"""user_activity: each user's activity over their live sessions, as a Delta table."""
