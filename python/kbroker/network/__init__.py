"""Networking: the asyncio TCP server and per-connection flow control."""
