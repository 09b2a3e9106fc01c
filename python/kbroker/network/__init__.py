"""Networking: the asyncio TCP server and its bounds (`server`), what a handler knows of a
request (`request`), and the connections a broker opens to other brokers (`client`)."""
