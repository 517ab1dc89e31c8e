"""ssmviz's Qt-free core: numerics, GPU runtime, kernel loaders, references and checks.

Nothing under ``ssmviz.core`` imports Qt (an import contract in pyproject.toml and a
test enforce it), so the CLI, the app and scripts share the same functions and give the
same verdicts. Each kernel family lives in its package under :mod:`ssmviz.core.families`.

Glossary (paper symbol → name in code), after johnma2006/mamba-minimal:

=============  ===============  ==========================================================
symbol         name             meaning
=============  ===============  ==========================================================
L              seq_len          sequence length
D (channels)   d_inner          channels of the scanned input (S6); n_heads·d_head (SSD)
N              d_state          state size per channel (S6) or per head (SSD)
H, P, G        n_heads, d_head, n_groups   SSD heads, head size, B/C groups
Q              chunk_len        SSD chunk length
u / x          u (S6), x (SSD)  the input sequence
Δ              delta (raw)      step size before bias/softplus; Δ = softplus(delta + delta_bias)
Δ (SSD)        dt (raw)         dt_eff = softplus(dt + dt_bias)
A              A = -exp(A_log)  continuous state matrix (diagonal), stored as A_log
Ā              dA, A_bar        discretised state matrix exp(Δ·A)
B̄·u            bu, B_bar_u      discretised input: Δ·B·u (mamba, Euler) or (Ā−1)/A·B·u (ZOH)
B, C           B, C             input and output projections, (batch, seq_len, d_state)
D              D                skip connection, y += D·u
h_t            h                hidden state, h_t = Ā_t h_{t-1} + B̄_t u_t
y_t            y                output, y_t = C_t·h_t + D·u_t
dX             dX               gradient of the loss with respect to X (dy: upstream)
=============  ===============  ==========================================================
"""
