"""The Redis seam: connections (one server, Sentinel, Cluster), every key name
(``keys``), the homes a key set lives in (``homes``), the Lua scripts (``scripts``,
``lua/``), the wire codec, the outbox that carries a write across hash slots, and how a
Redis error is told apart and reported (``errors``). Nothing above this package asks
whether it runs on a cluster: it asks a home (``homes.Home``)."""
