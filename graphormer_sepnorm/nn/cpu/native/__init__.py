"""C kernels built at first use (see :mod:`~graphormer_sepnorm.nn.cpu.native.build`)."""
