HANDLERS: dict = {}
