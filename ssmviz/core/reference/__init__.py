"""What the families' float64 references share: the two conventions and softplus
(:mod:`._common`) and finite-difference gradients (:mod:`.gradcheck`); each family's
reference lives in its package under :mod:`ssmviz.core.families`."""
