"""``kbroker console``: a web console for any Kafka-compatible cluster.

`app` builds the Starlette application (pages, write endpoints, their guards, the lag
sampler), `views` asks the cluster what each page shows through `kbroker.tools` (the same
functions as the command line, never an admin logic of its own), `show` turns record
bytes into bounded, displayable text, `history` keeps each group's lag of the last hour
for its chart. Templates (Jinja2, autoescaped), the page script and style and the chart
library (uPlot, under static/vendor) ship in this package; nothing is fetched from
elsewhere. Its dependencies are the ``console`` extra (``pip install kbroker[console]``).
"""
