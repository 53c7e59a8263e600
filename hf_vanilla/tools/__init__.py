"""Tools that measure and draw the package: the benchmark (:mod:`.bench`), the opt-in CPU kernels
(:mod:`.cpu_kernels`), pictures (:mod:`.viz`, the [viz] extra) and the layers' table (:mod:`.layers`)."""
