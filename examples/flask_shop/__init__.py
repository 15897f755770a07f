"""The Flask shop example: orders publish ``OrderCreated``; inventory consumes it."""
