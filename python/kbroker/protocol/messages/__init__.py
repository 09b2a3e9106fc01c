"""Message declarations, one module per family of APIs.

Each module declares every request and response of its APIs exactly once
with `schema.message`; apis.py puts them into the APIS table.
"""
