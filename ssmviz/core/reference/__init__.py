"""Float64 numpy references for the SSM kernel families (S6 and SSD)."""
