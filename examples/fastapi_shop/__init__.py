"""The shop as a FastAPI app with async views: see README.md."""
