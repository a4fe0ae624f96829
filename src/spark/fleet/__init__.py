"""A fleet of Spark servers: nodes join a central, which routes each request to one that has its model.

`registry` (the central's view of its nodes and their health), `routing`
(where a request goes, pure), `forward` (trying the places in order),
`member` (the node side: join, report, trust only the central), `report`
(what nodes tell the central). See docs/fleet.md.
"""
