"""Tools that measure and draw the package: the benchmark (:mod:`.bench`), pictures (:mod:`.viz`, the [viz]
extra) and the layers' table (:mod:`.layers`)."""
