"""What every kernel runner shares (:mod:`._base`) and the matmul ceiling kernel; each
family's own runner lives in its package under :mod:`ssmviz.core.families`."""
