"""``kbroker console``: a web console for any Kafka-compatible cluster.

`app` builds the Starlette application (pages, write endpoints, their guards), `views`
asks the cluster what each page shows through `kbroker.tools` (the same functions as the
command line, never an admin logic of its own), `show` turns record bytes into bounded,
displayable text. Templates (Jinja2, autoescaped) and the page script and style ship in
this package; nothing is fetched from elsewhere. Its dependencies are the ``console``
extra (``pip install kbroker[console]``).
"""
