"""A graph as text and back: JSON, pictures, inspection."""
