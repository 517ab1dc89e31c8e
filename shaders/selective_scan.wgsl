// ssmviz's own S6 (Mamba selective scan) kernels, forward and backward.
//
// Conventions (params.convention): 0 = mamba (B̄u = Δ·B·u), 1 = builderforce
// (zero-order hold, B̄u = expm1(ΔA)/A·B·u). Δ = softplus(delta + delta_bias),
// delta_bias always added (the runner binds zeros without one). A = -exp(A_log).
//
// Why this design:
// * Parallel over time as well as channels: the visualiser's common case is few
//   channels and long sequences. Time is cut into chunks; a thread owns one
//   (batch, channel d, chunk) and walks its chunk sequentially holding a tile of
//   16 states in registers. d is the fastest thread axis inside a workgroup
//   (wg_d lanes, a power of two <= 64) so u/delta/y accesses are coalesced when
//   d_inner is wide; when it is narrow, the remaining lanes take further chunks.
// * A chunk is summarised by (s, S): s = ΣΔ over the chunk (its decay is
//   exp(A·s), more accurate than a product of per-step exps and one float per
//   channel instead of one per state) and S = the chunk's end state from zero.
//   These compose with the associative operator (s1,S1)∘(s2,S2) =
//   (s1+s2, exp(A·s2)·S1 + S2). The carry scan over chunks is hierarchical:
//   s6_scan_up scans blocks of 32 summaries per thread and emits block
//   aggregates, recursively until one block remains; s6_scan_down then folds
//   each level's block carries back in (level 0 as the output passes read it).
//   Every level is its own dispatch, so no workgroup ever reads another
//   workgroup's result within one dispatch.
// * Chunked forward = summary pass, scan passes, output pass (recompute with the
//   carry). u and delta are read twice; the chunk length is picked by the runner so the
//   summaries stay small next to u/delta (e.g. 512 steps at the wide size).
// * Backward uses 32-step chunks (below: the recomputing backward; with the forward's
//   checkpoints or its stored h, see the notes below). One summary pass produces both
//   the forward chunk summaries and the reverse (adjoint) chunk summaries; the reverse
//   direction is stored with its chunk order flipped so the same scan kernels
//   serve both. The output pass recomputes states inside each chunk from the
//   scanned chunk-start state: one sweep keeps a checkpoint every 8 steps (it stops
//   at the last sub-chunk's start), then each 8-step sub-chunk is recomputed into a
//   private history and swept in reverse with the adjoint. No (batch, seq_len,
//   d_inner, d_state) scratch and no division by Ā to walk states backwards.
// * Determinism: nothing is accumulated by atomics. dB/dC (sums over d_inner)
//   are reduced over a workgroup's lanes in workgroup memory in a fixed order
//   (every step), then over d-blocks by s6_reduce_rows /
//   s6_reduce_final in fixed row groups.
//   dA_log, dD, ddelta_bias get one partial row per (batch, chunk group) and are
//   reduced the same way. du/ddelta are owned by one thread each.
// * Barriers sit only in loops whose bounds come from the uniform params; idle
//   invocations are predicated, never returned early, in kernels with barriers.
// * Each step's inputs are loaded one step ahead, and loads are unconditional (clamped
//   indices; delta_bias is always added): a load under a condition puts its latency on the
//   critical path where the condition closes.
// * With the forward's h stored (the app, and `ssmviz check` below 2^24 states) the
//   backward reads h_{t-1} instead of recomputing it (s6_bwd_output_h): s6_bwd_summary
//   makes the adjoint summaries only (FLAG_ADJOINT_ONLY), one reverse sweep per chunk, and
//   each channel writes its own dB/dC row (whole vec4s), summed over d by s6_reduce_bc, so
//   there is no per-step exchange and no barrier. Used while those rows take <= 64 MiB.
// * On a device with usable subgroups the recomputing s6_bwd_output sums each step's dB/dC
//   over SG_GROUP = min(subgroup size, wg_d, 32) channels by a reduce-scatter of subgroup
//   shuffles (sg_bc_store), one partial row per SG_GROUP channels, with no workgroup memory
//   and no barrier. The workgroup-memory exchange stays for devices without subgroups (the
//   other branch of the `#if subgroups` blocks; the runner blanks the unused branch).
// * Forward checkpoints (FLAG_CKPT; the runner's "checkpoint" backward, used without a
//   stored h while they take <= 1 GiB): a forward that runs before a backward also writes
//   the state entering every 8th step (the one-pass forward: each sub-chunk's carry-in;
//   the chunked one: its running state), as Mamba's CUDA forward saves its chunk states.
//   The backward then needs no forward chunk summaries (s6_bwd_summary makes the adjoint's
//   alone), half the carry scan, and no checkpoint sweep; a chunk only places the
//   adjoint's carries, so it may be any multiple of 8 steps.
// * The measurements behind these choices, and the variants measured and not kept: see
//   families/s6/NOTES.md (one section per round).
// * FLAG_REVERSE_WG reverses the workgroup order in every pass (race probe: the
//   results must not change bitwise).

struct Params {
    batch: u32,
    seq_len: u32,
    d_inner: u32,
    d_state: u32,
    chunk_len: u32,   // time steps per chunk
    n_chunks: u32,
    convention: u32,  // 0 mamba, 1 builderforce
    flags: u32,       // FLAG_* bits (below)
    n_wg: u32,        // logical workgroups of this dispatch
    wg_d: u32,        // lanes along d_inner in a workgroup (power of two <= 64)
    n_dblocks: u32,   // ceil(d_inner / wg_d)
    n_cgroups: u32,   // groups of 64 / wg_d chunks (or chunk groups) per workgroup
    k_chunks: u32,    // backward output: chunks per thread
    n_kgroups: u32,   // backward output: ceil(n_chunks / k_chunks)
    scan_n: u32,      // scan: elements per line at this level
    scan_sets: u32,   // scan: independent (batch-like) sets
    off_in_s: u32,    // scan offsets into scan_dt_sums / scan_states (elements)
    off_in_S: u32,
    off_out_s: u32,
    off_out_S: u32,
    off_agg_s: u32,   // up-sweep: where block aggregates go; down-sweep: next level's result
    off_agg_S: u32,
    off_carry: u32,   // output passes: offset of the level-0 scanned states in scan_states
    red_rows: u32,    // reductions: rows to sum, columns, input / output offsets
    red_cols: u32,
    red_in: u32,
    red_out: u32,
    m0: u32,          // reduce_final: columns going to out0, out1 (rest to out2)
    m1: u32,
    n_threads: u32,   // flat kernels: number of useful invocations
    off_ckpt: u32,    // forward checkpoints: offset in h_out (forward) = in scan_states (backward)
    _pad: u32,        // to a multiple of 16 bytes
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> u: array<f32>;
@group(0) @binding(2) var<storage, read> delta: array<f32>;
@group(0) @binding(3) var<storage, read> A_log: array<f32>;
@group(0) @binding(4) var<storage, read> B: array<vec4<f32>>;
@group(0) @binding(5) var<storage, read> C: array<vec4<f32>>;
@group(0) @binding(6) var<storage, read> D: array<f32>;
@group(0) @binding(7) var<storage, read> delta_bias: array<f32>;
@group(0) @binding(8) var<storage, read> dy: array<f32>;
@group(0) @binding(9) var<storage, read_write> y: array<f32>;
@group(0) @binding(10) var<storage, read_write> h_out: array<f32>;
@group(0) @binding(11) var<storage, read_write> last_state: array<f32>;
@group(0) @binding(12) var<storage, read_write> scan_dt_sums: array<f32>;
@group(0) @binding(13) var<storage, read_write> scan_states: array<f32>;
@group(0) @binding(14) var<storage, read_write> du: array<f32>;
@group(0) @binding(15) var<storage, read_write> ddelta: array<f32>;
@group(0) @binding(16) var<storage, read_write> partials: array<f32>;
@group(0) @binding(17) var<storage, read_write> param_partials: array<f32>;
@group(0) @binding(18) var<storage, read_write> out0: array<f32>;
@group(0) @binding(19) var<storage, read_write> out1: array<f32>;
@group(0) @binding(20) var<storage, read_write> out2: array<f32>;
// The per-channel dB | dC rows of s6_bwd_output_h (the `partials` buffer) as vec4s: written by
// it (partials4_rw), summed by s6_reduce_bc (partials4). A row is dB then dC of (batch, seq_len,
// d_state) with each d_state row padded to whole vec4s: a quarter of the stores and loads.
@group(0) @binding(21) var<storage, read> partials4: array<vec4<f32>>;
@group(0) @binding(22) var<storage, read_write> partials4_rw: array<vec4<f32>>;

const WORKGROUP: u32 = 64u;   // invocations per workgroup, every pass
const TILE: u32 = 16u;        // states per thread per tile
const SUB: u32 = 8u;          // backward: steps per recomputed sub-chunk
const SCAN_BLOCK: u32 = 32u;  // scan: summaries per thread per level
const LOG2E: f32 = 1.4426950408889634;
const LN2: f32 = 0.6931471805599453;
// params.flags bits, as FLAG_* in the runner (kernels/s6.py).
const FLAG_STORE_H: u32 = 2u;       // h written (s6_fwd_output)
const FLAG_REVERSE_WG: u32 = 4u;    // workgroups in reverse order (race probe)
const FLAG_ADJOINT_ONLY: u32 = 8u;  // s6_bwd_summary: adjoint summaries only
const FLAG_CKPT: u32 = 16u;         // forward checkpoints written / read
// params.convention and the CONV override: 0 mamba, 1 builderforce; an override left at
// FROM_PARAMS reads the Params field.
const CONV_BUILDERFORCE: u32 = 1u;
const FROM_PARAMS: u32 = 2u;

// Pipeline constants, set by the runner for the passes that read them (s6_fwd_*,
// s6_bwd_output*), so that the branches on them and the d_state bounds fold when the
// pipeline is built. Their defaults read the Params fields instead: a pipeline built
// without them (the other passes) is still right. s6_bwd_summary reads Params (slower
// folded); seq_len and d_inner stay fields (a pipeline per size). See
// families/s6/NOTES.md, 'Sixth round: pipeline constants'.
override CONV: u32 = 2u;     // convention: 0 mamba, 1 builderforce, 2 from params.convention
override CKPT: u32 = 2u;     // checkpoints written / read: 0 no, 1 yes, 2 from FLAG_CKPT
override D_STATE: u32 = 0u;  // d_state (set for multiples of 16); 0: from params.d_state

// dB / dC contributions of one step: 64 lanes × (4 dB + 4 dC) vec4s, summed over the lanes
// every step. A lane's row of 8 vec4s is rotated by the lane index (sm_at) so that a lane's
// stores and a column's reads both fall in distinct banks without padding (the runner's
// WORKGROUP_STORAGE must match bc_smem and bc_part).
const SM_ROW: u32 = 8u;
var<workgroup> bc_smem: array<vec4<f32>, 512>;
var<workgroup> bc_part: array<vec4<f32>, 64>;   // first-level lane sums (64 invocations)

// ---------------------------------------------------------------- helpers

fn wg_linear(wid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    let w = wid.x + wid.y * nwg.x;
    if ((params.flags & FLAG_REVERSE_WG) != 0u && w < params.n_wg) {
        return params.n_wg - 1u - w;
    }
    return w;
}

// log1p(e) for e in [0, 1] as 2·atanh(e / (2 + e)); GPU log() is not accurate near 1.
fn log1p_01(e: f32) -> f32 {
    let z = e / (2.0 + e);
    let z2 = z * z;
    var p = 1.0 / 17.0;
    p = p * z2 + 1.0 / 15.0;
    p = p * z2 + 1.0 / 13.0;
    p = p * z2 + 1.0 / 11.0;
    p = p * z2 + 1.0 / 9.0;
    p = p * z2 + 1.0 / 7.0;
    p = p * z2 + 1.0 / 5.0;
    p = p * z2 + 1.0 / 3.0;
    p = p * z2 + 1.0;
    return 2.0 * z * p;
}

// Stable softplus: x above 20 (as the mamba CUDA kernels), else max(x,0) + log1p(exp(-|x|)).
fn softplus(x: f32) -> f32 {
    if (x > 20.0) {
        return x;
    }
    return max(x, 0.0) + log1p_01(exp(-abs(x)));
}

fn softplus_grad(x: f32) -> f32 {
    if (x > 20.0) {
        return 1.0;
    }
    return 1.0 / (1.0 + exp(-x));
}

// Zero-order-hold input coefficient expm1(Δ·A)/A for 4 states; x = Δ·A, a = exp(x),
// inv_a = 1/A. The Taylor series of Δ·expm1(x)/x below |x| = 0.5 avoids the cancellation
// in a - 1; above it (a - 1)·(1/A) needs no division per step.
fn zoh_coef4(x: vec4<f32>, a: vec4<f32>, dt: f32, inv_a: vec4<f32>) -> vec4<f32> {
    var p = vec4<f32>(1.0 / 3628800.0);
    p = p * x + 1.0 / 362880.0;
    p = p * x + 1.0 / 40320.0;
    p = p * x + 1.0 / 5040.0;
    p = p * x + 1.0 / 720.0;
    p = p * x + 1.0 / 120.0;
    p = p * x + 1.0 / 24.0;
    p = p * x + 1.0 / 6.0;
    p = p * x + 0.5;
    p = p * x + 1.0;
    return select((a - 1.0) * inv_a, dt * p, abs(x) < vec4<f32>(0.5));
}

// d/dA of expm1(Δ·A)/A = Δ²·(x·e^x - expm1(x))/x² (series below |x| = 0.5, where the
// direct form cancels), written as (Δ·A·a - (a - 1))/A² above it.
fn zoh_coef_dA4(x: vec4<f32>, a: vec4<f32>, dt: f32, inv_a: vec4<f32>) -> vec4<f32> {
    var p = vec4<f32>(1.0 / 403200.0);
    p = p * x + 1.0 / 45360.0;
    p = p * x + 1.0 / 5760.0;
    p = p * x + 1.0 / 840.0;
    p = p * x + 1.0 / 144.0;
    p = p * x + 1.0 / 30.0;
    p = p * x + 1.0 / 8.0;
    p = p * x + 1.0 / 3.0;
    p = p * x + 0.5;
    return select((x * a - (a - 1.0)) * inv_a * inv_a, dt * dt * p, abs(x) < vec4<f32>(0.5));
}

// A tile of 16 states lives in four vec4 registers (h0..h3 etc.), never in an indexed
// array: drivers keep dynamically indexed private arrays in local memory.

// A = -exp(A_log) for states n..n+3 of channel d; 0 past d_state (then Ā = 1, h stays 0).
fn ld_A4(d: u32, n: u32) -> vec4<f32> {
    let ds = d_state();
    let base = d * ds;
    let last = base + ds - 1u;
    return vec4<f32>(
        select(0.0, -exp(A_log[min(base + n, last)]), n < ds),
        select(0.0, -exp(A_log[min(base + n + 1u, last)]), n + 1u < ds),
        select(0.0, -exp(A_log[min(base + n + 2u, last)]), n + 2u < ds),
        select(0.0, -exp(A_log[min(base + n + 3u, last)]), n + 3u < ds),
    );
}

// A = -exp(A_log), 1/A and A·log2(e) of the 16 states n0..n0+15 of channel d (a tile).
struct TileA {
    A0: vec4<f32>,
    A1: vec4<f32>,
    A2: vec4<f32>,
    A3: vec4<f32>,
    iA0: vec4<f32>,
    iA1: vec4<f32>,
    iA2: vec4<f32>,
    iA3: vec4<f32>,
    E0: vec4<f32>,
    E1: vec4<f32>,
    E2: vec4<f32>,
    E3: vec4<f32>,
}

fn tile_a(d: u32, n0: u32) -> TileA {
    var t: TileA;
    t.A0 = ld_A4(d, n0);
    t.A1 = ld_A4(d, n0 + 4u);
    t.A2 = ld_A4(d, n0 + 8u);
    t.A3 = ld_A4(d, n0 + 12u);
    t.iA0 = 1.0 / t.A0;
    t.iA1 = 1.0 / t.A1;
    t.iA2 = 1.0 / t.A2;
    t.iA3 = 1.0 / t.A3;
    t.E0 = t.A0 * LOG2E;
    t.E1 = t.A1 * LOG2E;
    t.E2 = t.A2 * LOG2E;
    t.E3 = t.A3 * LOG2E;
    return t;
}

// B and C are bound as rows of ceil(d_state / 4) vec4s, zero-padded, followed by one
// zero vec4 (index bc_zero()) that stands in for the vec4s of a tile past the row: one
// 16-byte load and one index select per 4 states instead of 4 clamped scalar loads.
struct BcTile {
    q: vec4<u32>,    // the tile's 4 vec4 indices within a row
    ok: vec4<bool>,  // inside the row
}

fn bc_q4() -> u32 {
    return (d_state() + 3u) / 4u;
}

fn bc_zero() -> u32 {
    return params.batch * params.seq_len * bc_q4();
}

fn bc_tile(n0: u32) -> BcTile {
    var bt: BcTile;
    bt.q = vec4<u32>(n0 / 4u) + vec4<u32>(0u, 1u, 2u, 3u);
    bt.ok = bt.q < vec4<u32>(bc_q4());
    return bt;
}

// First vec4 of the B / C row of (b, t).
fn bc_row(b: u32, t: u32) -> u32 {
    return (b * params.seq_len + t) * bc_q4();
}

// States n0 + 4k .. n0 + 4k + 3 of the row r (k constant at every call site).
fn ld_B4(r: u32, bt: BcTile, k: u32) -> vec4<f32> {
    return B[select(bc_zero(), r + bt.q[k], bt.ok[k])];
}

fn ld_C4(r: u32, bt: BcTile, k: u32) -> vec4<f32> {
    return C[select(bc_zero(), r + bt.q[k], bt.ok[k])];
}

// scan_states states n..n+3 of the row starting at base; 0 past d_state.
fn ld_S4(base: u32, n: u32) -> vec4<f32> {
    let ds = d_state();
    let last = base + ds - 1u;
    return vec4<f32>(
        select(0.0, scan_states[min(base + n, last)], n < ds),
        select(0.0, scan_states[min(base + n + 1u, last)], n + 1u < ds),
        select(0.0, scan_states[min(base + n + 2u, last)], n + 2u < ds),
        select(0.0, scan_states[min(base + n + 3u, last)], n + 3u < ds),
    );
}

fn st_S4(base: u32, n: u32, v: vec4<f32>) {
    let ds = d_state();
    if (n < ds) { scan_states[base + n] = v.x; }
    if (n + 1u < ds) { scan_states[base + n + 1u] = v.y; }
    if (n + 2u < ds) { scan_states[base + n + 2u] = v.z; }
    if (n + 3u < ds) { scan_states[base + n + 3u] = v.w; }
}

fn st_h4(base: u32, n: u32, v: vec4<f32>) {
    let ds = d_state();
    if (n < ds) { h_out[base + n] = v.x; }
    if (n + 1u < ds) { h_out[base + n + 1u] = v.y; }
    if (n + 2u < ds) { h_out[base + n + 2u] = v.z; }
    if (n + 3u < ds) { h_out[base + n + 3u] = v.w; }
}

// Forward checkpoints (FLAG_CKPT, h not stored): for every SUB-step block k (k <
// ceil(seq_len / SUB)), the state entering step k·SUB as (batch, k, d_state, d_inner) from
// offset off_ckpt. The forward passes write them through h_out, which the runner binds to
// the backward's scan_states buffer (past its scan levels); the recomputing backward reads them
// through scan_states and starts each sub-chunk from one instead of from a forward carry scan and
// a checkpoint sweep (one binding fewer than reading h_out there). d is fastest because
// the lanes of every pass that touches them run along d (layouts measured: see
// families/s6/NOTES.md, 'Forward checkpoints').
fn has_ckpt() -> bool {
    if (CKPT < FROM_PARAMS) {
        return CKPT == 1u;
    }
    return (params.flags & FLAG_CKPT) != 0u;
}

fn d_state() -> u32 {
    if (D_STATE > 0u) {
        return D_STATE;
    }
    return params.d_state;
}

fn is_zoh() -> bool {
    if (CONV < FROM_PARAMS) {
        return CONV == CONV_BUILDERFORCE;
    }
    return params.convention == CONV_BUILDERFORCE;
}

// 16-state tiles of d_state (uniform).
fn state_tiles() -> u32 {
    return (d_state() + TILE - 1u) / TILE;
}

fn ck_idx(b: u32, k: u32, n: u32, d: u32) -> u32 {
    let n_ck = (params.seq_len + SUB - 1u) / SUB;
    return params.off_ckpt + ((b * n_ck + k) * d_state() + n) * params.d_inner + d;
}

// States n..n+3 (those below d_state) of the checkpoint entering step k·SUB.
fn st_ck4(b: u32, k: u32, d: u32, n: u32, v: vec4<f32>) {
    let ds = d_state();
    if (n < ds) { h_out[ck_idx(b, k, n, d)] = v.x; }
    if (n + 1u < ds) { h_out[ck_idx(b, k, n + 1u, d)] = v.y; }
    if (n + 2u < ds) { h_out[ck_idx(b, k, n + 2u, d)] = v.z; }
    if (n + 3u < ds) { h_out[ck_idx(b, k, n + 3u, d)] = v.w; }
}

// The checkpointed state entering step t (a multiple of SUB), states n..n+3.
fn ld_start4(b: u32, t: u32, d: u32, n: u32) -> vec4<f32> {
    let k = t / SUB;
    let ds = d_state();
    let last = ds - 1u;
    return vec4<f32>(
        select(0.0, scan_states[ck_idx(b, k, min(n, last), d)], n < ds),
        select(0.0, scan_states[ck_idx(b, k, min(n + 1u, last), d)], n + 1u < ds),
        select(0.0, scan_states[ck_idx(b, k, min(n + 2u, last), d)], n + 2u < ds),
        select(0.0, scan_states[ck_idx(b, k, min(n + 3u, last), d)], n + 3u < ds),
    );
}

fn st_last4(base: u32, n: u32, v: vec4<f32>) {
    let ds = d_state();
    if (n < ds) { last_state[base + n] = v.x; }
    if (n + 1u < ds) { last_state[base + n + 1u] = v.y; }
    if (n + 2u < ds) { last_state[base + n + 2u] = v.z; }
    if (n + 3u < ds) { last_state[base + n + 3u] = v.w; }
}

fn st_par4(base: u32, n: u32, v: vec4<f32>) {
    let ds = d_state();
    if (n < ds) { param_partials[base + n] = v.x; }
    if (n + 1u < ds) { param_partials[base + n + 1u] = v.y; }
    if (n + 2u < ds) { param_partials[base + n + 2u] = v.z; }
    if (n + 3u < ds) { param_partials[base + n + 3u] = v.w; }
}

// One forward step of 4 states: h = Ā·h + B̄·u for the states' B (bv) and the step's u
// (Ā = exp2(Δ·E), E = A·log2(e): one multiply less per state than exp(Δ·A)). B̄·u is
// B·(coef·u), coef = Δ or zero-order hold's: with mamba's coef, a splat of Δ once the
// convention is a pipeline constant, Δ·u is one multiply a step. Both conventions go through
// the same expressions, so that a pipeline with the convention folded and one reading it
// from Params give the same bits.
fn fwd_q(h: vec4<f32>, E: vec4<f32>, iA: vec4<f32>, dt: f32, bv: vec4<f32>, uv: f32,
         zoh: bool) -> vec4<f32> {
    let x2 = dt * E;
    let a = exp2(x2);
    var coef = vec4<f32>(dt);
    if (zoh) {
        coef = zoh_coef4(x2 * LN2, a, dt, iA);
    }
    return a * h + bv * (coef * uv);
}

// One reverse step of 4 states given h_{t-1} (hp) and gc = Ā_{t+1}·g_{t+1}.
struct BwdQ {
    gc: vec4<f32>,   // Ā_t·g_t, handed to step t-1
    dB: vec4<f32>,   // this channel's share of dB_t
    dC: vec4<f32>,   // this channel's share of dC_t
    dA: vec4<f32>,   // dL/dA contribution
    du: f32,
    ddt: f32,        // dL/dΔ_t contribution
}

fn bwd_q(hp: vec4<f32>, A: vec4<f32>, E: vec4<f32>, iA: vec4<f32>, gc: vec4<f32>,
         bv: vec4<f32>, cv: vec4<f32>, dt: f32, uv: f32, dyv: f32, zoh: bool) -> BwdQ {
    let x = dt * A;
    let a = exp2(dt * E);
    var coef = vec4<f32>(dt);
    var dx_ddt = bv * uv;
    var dx_dA = vec4<f32>(0.0);
    if (zoh) {
        coef = zoh_coef4(x, a, dt, iA);
        dx_ddt = a * bv * uv;
        dx_dA = bv * uv * zoh_coef_dA4(x, a, dt, iA);
    }
    let cu = coef * uv;  // mamba: Δ·u, one multiply (as in fwd_q)
    let ht = a * hp + bv * cu;
    let g = cv * dyv + gc;
    var r: BwdQ;
    r.gc = a * g;
    r.dB = g * cu;
    r.dC = dyv * ht;
    r.dA = g * (dt * a * hp + dx_dA);
    r.du = dot(g, coef * bv);
    r.ddt = dot(g, A * a * hp + dx_ddt);
    return r;
}

// du (with D·dy) and ddelta of element i from the 4 quads of one state tile: written by
// the first tile, added to by later ones; returns this tile's share of ddelta.
fn put_du_ddelta(i: u32, first: bool, d_skip_dy: f32, z: f32, r0: BwdQ, r1: BwdQ, r2: BwdQ,
                 r3: BwdQ) -> f32 {
    let du_t = (r0.du + r1.du) + (r2.du + r3.du);
    let ddz = softplus_grad(z) * ((r0.ddt + r1.ddt) + (r2.ddt + r3.ddt));
    if (first) {
        du[i] = d_skip_dy + du_t;
        ddelta[i] = ddz;
    } else {
        du[i] = du[i] + du_t;
        ddelta[i] = ddelta[i] + ddz;
    }
    return ddz;
}

// Partial row `row` of param_partials: dA_log of channel d's states n0..n0+15 (dL/dA·A), then
// after all d_inner·d_state of them dD and ddelta_bias of channel d.
fn st_dA_par(row: u32, d: u32, n0: u32, ta: TileA, dA0: vec4<f32>, dA1: vec4<f32>,
             dA2: vec4<f32>, dA3: vec4<f32>) {
    let rbase = row * (params.d_inner * d_state() + 2u * params.d_inner) + d * d_state();
    st_par4(rbase, n0, ta.A0 * dA0);
    st_par4(rbase, n0 + 4u, ta.A1 * dA1);
    st_par4(rbase, n0 + 8u, ta.A2 * dA2);
    st_par4(rbase, n0 + 12u, ta.A3 * dA3);
}

fn st_dd_par(row: u32, d: u32, dD: f32, ddb: f32) {
    let rbase = row * (params.d_inner * d_state() + 2u * params.d_inner)
                + params.d_inner * d_state();
    param_partials[rbase + d] = dD;
    param_partials[rbase + params.d_inner + d] = ddb;
}

fn act_idx(b: u32, t: u32, d: u32) -> u32 {
    return (b * params.seq_len + t) * params.d_inner + d;
}

fn bc_idx(b: u32, t: u32, n: u32) -> u32 {
    return (b * params.seq_len + t) * d_state() + n;
}

// Raw z = delta + bias of element i (channel d).
// The bias is added even without one: the runner then binds zeros, and z + 0 is z for the
// softplus (only -0 becomes +0). A load under a condition (an `if`, or a select the driver
// turns into one) costs its latency every step (see families/s6/NOTES.md, 'Fifth round').
fn delta_raw(i: u32, d: u32) -> f32 {
    return delta[i] + delta_bias[d];
}

// Everything one step reads, loaded one step ahead so that the loads of step t+1 are in
// flight while step t computes (the loop bodies are not unrolled by the drivers).
struct StepIn {
    z: f32,          // delta + bias
    u: f32,
    b0: vec4<f32>,
    b1: vec4<f32>,
    b2: vec4<f32>,
    b3: vec4<f32>,
    c0: vec4<f32>,
    c1: vec4<f32>,
    c2: vec4<f32>,
    c3: vec4<f32>,
}

fn load_step(b: u32, t: u32, d: u32, bt: BcTile, with_c: bool) -> StepIn {
    var s: StepIn;
    let i = act_idx(b, t, d);
    s.z = delta_raw(i, d);
    s.u = u[i];
    let bb = bc_row(b, t);
    s.b0 = ld_B4(bb, bt, 0u);
    s.b1 = ld_B4(bb, bt, 1u);
    s.b2 = ld_B4(bb, bt, 2u);
    s.b3 = ld_B4(bb, bt, 3u);
    if (with_c) {
        s.c0 = ld_C4(bb, bt, 0u);
        s.c1 = ld_C4(bb, bt, 1u);
        s.c2 = ld_C4(bb, bt, 2u);
        s.c3 = ld_C4(bb, bt, 3u);
    }
    return s;
}

// One thread's place in a chunk kernel: workgroup -> (d block, chunk group, batch),
// lane -> (d, chunk). `count` is the number of chunks (or chunk groups) on that axis.
struct Lane {
    ok: bool,      // this invocation has work
    b: u32,
    c: u32,        // chunk (or chunk group) index
    d: u32,
    cgl: u32,      // chunk lane in the workgroup
    dblk: u32,
    grp: u32,
    wok: bool,     // the workgroup itself is real
}

fn chunk_lane(wid: vec3<u32>, nwg: vec3<u32>, lid: u32, count: u32) -> Lane {
    var ln: Lane;
    let w = wg_linear(wid, nwg);
    let lane = lid % params.wg_d;
    ln.cgl = lid / params.wg_d;
    ln.dblk = w % params.n_dblocks;
    let rest = w / params.n_dblocks;
    ln.grp = rest % params.n_cgroups;
    ln.b = rest / params.n_cgroups;
    ln.d = ln.dblk * params.wg_d + lane;
    ln.c = ln.grp * (WORKGROUP / params.wg_d) + ln.cgl;
    ln.wok = w < params.n_wg;
    ln.ok = ln.wok && ln.d < params.d_inner && ln.c < count && ln.b < params.batch;
    return ln;
}

// Index of a scan element (set, chunk, d) in scan_dt_sums; times d_state (+ n) in scan_states.
fn s_idx(set_b: u32, count: u32, c: u32, d: u32) -> u32 {
    return (set_b * count + c) * params.d_inner + d;
}

// The scanned (carry) state of chunk cc of scan set sb, read by the output passes. Level 0
// of the carry scan holds inclusive prefixes within blocks of SCAN_BLOCK chunks; the previous
// block's finished prefix (level 1, off_agg_S) is folded in here rather than by a level-0
// s6_scan_down pass, which would rewrite all of level 0 (the largest scan array).
struct CarryRef {
    S: u32,       // level-0 state row in scan_states
    agg: u32,     // level-1 state row of the previous block
    s: f32,       // level-0 ΣΔ prefix within the block
    fold: bool,   // not in the first block
}

fn carry_ref(sb: u32, cc: u32, d: u32) -> CarryRef {
    let n_chunks = params.n_chunks;
    let ie = s_idx(sb, n_chunks, cc, d);
    let blk = cc / SCAN_BLOCK;
    var r: CarryRef;
    r.S = params.off_carry + ie * d_state();
    r.fold = blk > 0u;
    let n_blocks = (n_chunks + SCAN_BLOCK - 1u) / SCAN_BLOCK;
    r.agg = params.off_agg_S + s_idx(sb, n_blocks, max(blk, 1u) - 1u, d) * d_state();
    r.s = select(0.0, scan_dt_sums[params.off_out_s + ie], r.fold);
    return r;
}

// States n..n+3 of a carry; E = A·log2(e) of those states.
fn ld_carry4(r: CarryRef, n: u32, E: vec4<f32>) -> vec4<f32> {
    var h = ld_S4(r.S, n);
    if (r.fold) {
        h = h + exp2(E * r.s) * ld_S4(r.agg, n);
    }
    return h;
}

// ---------------------------------------------------------------- forward

// Pass 1: per (batch, chunk, d): ΣΔ and, per state, the chunk's end state from h = 0.
@compute @workgroup_size(64)
fn s6_fwd_summary(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let ln = chunk_lane(wid, nwg, lid, params.n_chunks);
    // Nobody reads the last chunk's summary (chunk c starts from the carry of c - 1).
    if (!ln.ok || ln.c + 1u == params.n_chunks) {
        return;  // no barriers in this entry point
    }
    let ds = d_state();
    let t0 = ln.c * params.chunk_len;
    let t1 = min(t0 + params.chunk_len, params.seq_len);
    let zoh = is_zoh();
    let n_tiles = state_tiles();
    var ssum = 0.0;
    for (var tile = 0u; tile < n_tiles; tile++) {
        let n0 = tile * TILE;
        let bt = bc_tile(n0);
        let ta = tile_a(ln.d, n0);
        var h0 = vec4<f32>(0.0);
        var h1 = vec4<f32>(0.0);
        var h2 = vec4<f32>(0.0);
        var h3 = vec4<f32>(0.0);
        var sacc = 0.0;
        var nx = load_step(ln.b, min(t0, t1 - 1u), ln.d, bt, false);
        for (var t = t0; t < t1; t++) {
            let cur = nx;
            nx = load_step(ln.b, min(t + 1u, t1 - 1u), ln.d, bt, false);
            let dt = softplus(cur.z);
            let uv = cur.u;
            sacc = sacc + dt;
            h0 = fwd_q(h0, ta.E0, ta.iA0, dt, cur.b0, uv, zoh);
            h1 = fwd_q(h1, ta.E1, ta.iA1, dt, cur.b1, uv, zoh);
            h2 = fwd_q(h2, ta.E2, ta.iA2, dt, cur.b2, uv, zoh);
            h3 = fwd_q(h3, ta.E3, ta.iA3, dt, cur.b3, uv, zoh);
        }
        ssum = sacc;
        let base = params.off_in_S + s_idx(ln.b, params.n_chunks, ln.c, ln.d) * ds;
        st_S4(base, n0, h0);
        st_S4(base, n0 + 4u, h1);
        st_S4(base, n0 + 8u, h2);
        st_S4(base, n0 + 12u, h3);
    }
    scan_dt_sums[params.off_in_s + s_idx(ln.b, params.n_chunks, ln.c, ln.d)] = ssum;
}

// Pass 3: recompute each chunk from its scanned start state; write y, h (optional), last_state.
@compute @workgroup_size(64)
fn s6_fwd_output(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let ln = chunk_lane(wid, nwg, lid, params.n_chunks);
    if (!ln.ok) {
        return;  // no barriers in this entry point
    }
    let ds = d_state();
    let t0 = ln.c * params.chunk_len;
    let t1 = min(t0 + params.chunk_len, params.seq_len);
    let zoh = is_zoh();
    let store_h = (params.flags & FLAG_STORE_H) != 0u;
    let ckpt = has_ckpt();
    let n_tiles = state_tiles();
    let d_skip = D[ln.d];
    for (var tile = 0u; tile < n_tiles; tile++) {
        let n0 = tile * TILE;
        let bt = bc_tile(n0);
        let ta = tile_a(ln.d, n0);
        var h0 = vec4<f32>(0.0);
        var h1 = vec4<f32>(0.0);
        var h2 = vec4<f32>(0.0);
        var h3 = vec4<f32>(0.0);
        if (ln.c > 0u) {
            let cr = carry_ref(ln.b, ln.c - 1u, ln.d);
            h0 = ld_carry4(cr, n0, ta.E0);
            h1 = ld_carry4(cr, n0 + 4u, ta.E1);
            h2 = ld_carry4(cr, n0 + 8u, ta.E2);
            h3 = ld_carry4(cr, n0 + 12u, ta.E3);
        }
        var nx = load_step(ln.b, t0, ln.d, bt, true);
        for (var t = t0; t < t1; t++) {
            let cur = nx;
            nx = load_step(ln.b, min(t + 1u, t1 - 1u), ln.d, bt, true);
            let i = act_idx(ln.b, t, ln.d);
            if (ckpt && t % SUB == 0u) {
                let k = t / SUB;
                st_ck4(ln.b, k, ln.d, n0, h0);
                st_ck4(ln.b, k, ln.d, n0 + 4u, h1);
                st_ck4(ln.b, k, ln.d, n0 + 8u, h2);
                st_ck4(ln.b, k, ln.d, n0 + 12u, h3);
            }
            let dt = softplus(cur.z);
            let uv = cur.u;
            h0 = fwd_q(h0, ta.E0, ta.iA0, dt, cur.b0, uv, zoh);
            h1 = fwd_q(h1, ta.E1, ta.iA1, dt, cur.b1, uv, zoh);
            h2 = fwd_q(h2, ta.E2, ta.iA2, dt, cur.b2, uv, zoh);
            h3 = fwd_q(h3, ta.E3, ta.iA3, dt, cur.b3, uv, zoh);
            let acc = dot(cur.c0, h0) + dot(cur.c1, h1) + dot(cur.c2, h2) + dot(cur.c3, h3);
            if (tile == 0u) {
                y[i] = d_skip * uv + acc;
            } else {
                y[i] = y[i] + acc;
            }
            if (store_h) {
                st_h4(i * ds, n0, h0);
                st_h4(i * ds, n0 + 4u, h1);
                st_h4(i * ds, n0 + 8u, h2);
                st_h4(i * ds, n0 + 12u, h3);
            }
        }
        if (t1 == params.seq_len) {
            let lb = (ln.b * params.d_inner + ln.d) * ds;
            st_last4(lb, n0, h0);
            st_last4(lb, n0 + 4u, h1);
            st_last4(lb, n0 + 8u, h2);
            st_last4(lb, n0 + 12u, h3);
        }
    }
}

// ---------------------------------------------------------------- forward, one pass

// For problems with many channels (the runner picks it when batch * d_inner is large,
// d_state <= 16 and h is not stored): every exp is computed once and u/delta are read
// once, with no chunk summaries or carry passes. A workgroup owns (batch, 16 channels)
// and walks the sequence in tiles of 32 steps staged in workgroup memory (the next
// tile's loads are in flight in registers while a tile is computed; Δ = softplus is
// computed once per element as it is stored). Invocation (d, τ, q) takes states
// 4q..4q+3 of channel d over the 8-step sub-chunk τ of the tile; a warp holds one τ
// (16 channels x 2 quads), so that its reads of Δ and u and its stores of y shares are
// free of bank conflicts:
//   1. from h = 0 it sweeps its 8 steps, keeping per step yl = C·h_local (+ D·u) and
//      w = C ⊙ P (P = running product of Ā), and ends with (P_end, h_local_end);
//   2. the 4 sub-chunk summaries are exchanged in workgroup memory; each invocation
//      composes the tile's carry-in with the summaries before its own (fixed order),
//      and every invocation of (d, q) also composes the tile's carry-out itself, so the
//      carry never leaves registers;
//   3. y_t = yl_t + w_t · carry_in per step; the 4 quads' shares are summed in
//      workgroup memory in a fixed order.
// The parallelism is batch * d_inner * 16 invocations (4 sub-chunks x 4 quads) without
// any inter-workgroup dependency (no race possible); the carry is exact composition,
// not a division by Ā.
const OT: u32 = 32u;          // steps per tile (4 sub-chunks of 8)
const OL: u32 = 16u;          // channels per workgroup
const OQ: u32 = 4u;           // state quads (d_state <= 16)
var<workgroup> o_dt: array<f32, 512>;          // OT x OL: Δ
var<workgroup> o_u: array<f32, 512>;           // OT x OL: u
var<workgroup> o_b: array<vec4<f32>, 128>;     // OT x OQ: B
var<workgroup> o_c: array<vec4<f32>, 128>;     // OT x OQ: C
var<workgroup> o_y: array<f32, 2048>;          // OT x OQ x OL: shares of y
var<workgroup> o_sum: array<vec4<f32>, 512>;   // (τ, q, d) x (P_end, h_local_end)

// One invocation's share of a tile's loads: delta + bias and u of steps r and r + 16
// (r = lid / 16) of its load channel lid % 16, and the B and C vec4 of (step lid / 4,
// quad lid % 4) when lid < 128.
struct OneTile {
    z: vec2<f32>,
    u: vec2<f32>,
    b: vec4<f32>,
    c: vec4<f32>,
}

// delta + bias and u of (b, t, d); past the sequence or d_inner (-1e30, 0): softplus -> 0
// exactly, so Ā = 1 and B̄u = 0. The loads are unconditional (clamped indices).
fn one_ld1(b: u32, t: u32, d: u32, ok: bool) -> vec2<f32> {
    let dd = select(0u, d, ok);
    let i = act_idx(b, min(t, params.seq_len - 1u), dd);
    let v = ok && t < params.seq_len;
    return vec2<f32>(select(-1e30, delta_raw(i, dd), v), select(0.0, u[i], v));
}

fn one_load(b: u32, t0: u32, d0: u32, lid: u32) -> OneTile {
    let d = d0 + lid % OL;
    let ok = d < params.d_inner;
    let r = lid / OL;
    let e0 = one_ld1(b, t0 + r, d, ok);
    let e1 = one_ld1(b, t0 + r + 16u, d, ok);
    var w: OneTile;
    w.z = vec2<f32>(e0.x, e1.x);
    w.u = vec2<f32>(e0.y, e1.y);
    let t = t0 + lid / OQ;
    let qq = lid % OQ;
    let in_row = lid < OT * OQ && t < params.seq_len && qq < bc_q4();
    let rr = select(bc_zero(), bc_row(b, t) + qq, in_row);
    w.b = B[rr];
    w.c = C[rr];
    return w;
}

fn one_store(w: OneTile, lid: u32) {
    let d = lid % OL;
    let r = lid / OL;
    o_dt[r * OL + d] = softplus(w.z.x);
    o_dt[(r + 16u) * OL + d] = softplus(w.z.y);
    o_u[r * OL + d] = w.u.x;
    o_u[(r + 16u) * OL + d] = w.u.y;
    if (lid < OT * OQ) {
        o_b[lid] = w.b;
        o_c[lid] = w.c;
    }
}

// One step of the local sweep of 4 states.
struct OneStep {
    h: vec4<f32>,    // local state (from 0 at the sub-chunk start)
    p: vec4<f32>,    // product of Ā since the sub-chunk start
    w: vec4<f32>,    // C ⊙ p: how the carry-in reaches y
    yl: f32,         // C · h_local (+ D·u)
}

fn one_step(prev: OneStep, s: u32, dt_lane: u32, q: u32, A: vec4<f32>, E: vec4<f32>,
            iA: vec4<f32>, d_skip: f32, zoh: bool) -> OneStep {
    let dt = o_dt[s * OL + dt_lane];
    let uv = o_u[s * OL + dt_lane];
    let a = exp2(dt * E);
    var k = vec4<f32>(dt);
    if (zoh) {
        k = zoh_coef4(dt * A, a, dt, iA);
    }
    let cv = o_c[s * OQ + q];
    var r: OneStep;
    r.h = a * prev.h + o_b[s * OQ + q] * (k * uv);  // as fwd_q: mamba's Δ·u once a step
    r.p = prev.p * a;
    r.w = cv * r.p;
    r.yl = d_skip * uv + dot(cv, r.h);
    return r;
}

@compute @workgroup_size(256)
fn s6_fwd_onepass(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let w = wg_linear(wid, nwg);
    let lane = lid % OL;
    let q = (lid / OL) % OQ;
    let tau = lid / (OQ * OL);
    let dblk = w % params.n_dblocks;
    let b = w / params.n_dblocks;
    let d0 = dblk * OL;
    let d = d0 + lane;
    let wok = w < params.n_wg && b < params.batch;
    // Idle invocations stay for the barriers (no early return in this entry point).
    let dok = wok && d < params.d_inner;
    let dsafe = select(0u, d, dok);
    let bsafe = select(0u, b, wok);
    let zoh = is_zoh();
    let A = ld_A4(dsafe, 4u * q);
    let iA = 1.0 / A;
    let E = A * LOG2E;
    let d_skip = select(0.0, D[dsafe], q == 0u);
    let n_tiles = (params.seq_len + OT - 1u) / OT;
    var carry = vec4<f32>(0.0);
    one_store(one_load(bsafe, 0u, d0, lid), lid);
    workgroupBarrier();
    for (var k = 0u; k < n_tiles; k++) {
        let t0 = k * OT;
        let nxt = one_load(bsafe, t0 + OT, d0, lid);  // past the end: the zero/-1e30 tile
        // 1. local sweep of the 8 steps of sub-chunk tau (written out: registers, not an
        //    indexed array).
        let s0 = tau * 8u;
        var st: OneStep;
        st.p = vec4<f32>(1.0);
        let r0 = one_step(st, s0, lane, q, A, E, iA, d_skip, zoh);
        let r1 = one_step(r0, s0 + 1u, lane, q, A, E, iA, d_skip, zoh);
        let r2 = one_step(r1, s0 + 2u, lane, q, A, E, iA, d_skip, zoh);
        let r3 = one_step(r2, s0 + 3u, lane, q, A, E, iA, d_skip, zoh);
        let r4 = one_step(r3, s0 + 4u, lane, q, A, E, iA, d_skip, zoh);
        let r5 = one_step(r4, s0 + 5u, lane, q, A, E, iA, d_skip, zoh);
        let r6 = one_step(r5, s0 + 6u, lane, q, A, E, iA, d_skip, zoh);
        let r7 = one_step(r6, s0 + 7u, lane, q, A, E, iA, d_skip, zoh);
        let xi = (tau * OQ + q) * OL + lane;
        o_sum[2u * xi] = r7.p;
        o_sum[2u * xi + 1u] = r7.h;
        workgroupBarrier();
        // 2. carry-in of this sub-chunk, and the tile's carry-out, in a fixed order.
        var cin = carry;
        var cout = carry;
        for (var j = 0u; j < 4u; j++) {
            let xj = (j * OQ + q) * OL + lane;
            cout = o_sum[2u * xj] * cout + o_sum[2u * xj + 1u];
            if (j + 1u == tau) {
                cin = cout;
            }
        }
        carry = cout;
        if (dok && has_ckpt() && t0 + s0 < params.seq_len) {  // the state entering this sub-chunk
            st_ck4(b, (t0 + s0) / SUB, d, 4u * q, cin);
        }
        // 3. y shares with the carry-in. Row s of o_y holds quad q's share at q ^ (s & 1), so
        //    that step 4's reads (rows s and s + 1 in a warp) fall in distinct banks too.
        let yo = (s0 * OQ + q) * OL + lane;
        let yx = (s0 * OQ + (q ^ 1u)) * OL + lane;
        o_y[yo] = r0.yl + dot(r0.w, cin);
        o_y[yx + OQ * OL] = r1.yl + dot(r1.w, cin);
        o_y[yo + 2u * OQ * OL] = r2.yl + dot(r2.w, cin);
        o_y[yx + 3u * OQ * OL] = r3.yl + dot(r3.w, cin);
        o_y[yo + 4u * OQ * OL] = r4.yl + dot(r4.w, cin);
        o_y[yx + 5u * OQ * OL] = r5.yl + dot(r5.w, cin);
        o_y[yo + 6u * OQ * OL] = r6.yl + dot(r6.w, cin);
        o_y[yx + 7u * OQ * OL] = r7.yl + dot(r7.w, cin);
        workgroupBarrier();
        // 4. y = sum of the quads' shares (2 outputs per invocation), then the next tile.
        for (var j = 0u; j < 2u; j++) {
            let e = lid + j * 256u;
            let s = e / OL;
            let dd = d0 + e % OL;
            let t = t0 + s;
            if (wok && dd < params.d_inner && t < params.seq_len) {
                let o = s * OQ * OL + e % OL;
                let x = s & 1u;
                y[act_idx(b, t, dd)] = ((o_y[o + x * OL] + o_y[o + (1u ^ x) * OL])
                                        + o_y[o + (2u ^ x) * OL]) + o_y[o + (3u ^ x) * OL];
            }
        }
        one_store(nxt, lid);
        workgroupBarrier();
    }
    if (dok && tau == 0u) {
        st_last4((b * params.d_inner + d) * d_state(), 4u * q, carry);
    }
}

// ---------------------------------------------------------------- carry scan

// Up-sweep of one level: thread per (set, block of 32 elements, d, n) scans its
// block sequentially, writes local inclusive prefixes (s out of place, S in
// place or not) and the block aggregate for the next level.
@compute @workgroup_size(64)
fn s6_scan_up(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let i = wg_linear(wid, nwg) * WORKGROUP + lid;
    if (i >= params.n_threads) {
        return;  // no barriers in this entry point
    }
    let ds = d_state();
    let scan_n = params.scan_n;
    let nb = (scan_n + SCAN_BLOCK - 1u) / SCAN_BLOCK;
    let n = i % ds;
    let r = i / ds;
    let d = r % params.d_inner;
    let r2 = r / params.d_inner;
    let blk = r2 % nb;
    let sb = r2 / nb;
    let A = -exp(A_log[d * ds + n]);
    var sa = 0.0;
    var Sa = 0.0;
    let c0 = blk * SCAN_BLOCK;
    let c1 = min(c0 + SCAN_BLOCK, scan_n);
    for (var c = c0; c < c1; c++) {
        let ie = s_idx(sb, scan_n, c, d);
        let s = scan_dt_sums[params.off_in_s + ie];
        let S = scan_states[params.off_in_S + ie * ds + n];
        sa = sa + s;
        Sa = exp(A * s) * Sa + S;
        if (n == 0u) {
            scan_dt_sums[params.off_out_s + ie] = sa;
        }
        scan_states[params.off_out_S + ie * ds + n] = Sa;
    }
    let ia = s_idx(sb, nb, blk, d);
    if (n == 0u) {
        scan_dt_sums[params.off_agg_s + ia] = sa;
    }
    scan_states[params.off_agg_S + ia * ds + n] = Sa;
}

// Down-sweep of one level: thread per element (set, c, d, n); folds in the
// finished prefix of the previous block from the level above.
@compute @workgroup_size(64)
fn s6_scan_down(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let i = wg_linear(wid, nwg) * WORKGROUP + lid;
    if (i >= params.n_threads) {
        return;  // no barriers in this entry point
    }
    let ds = d_state();
    let scan_n = params.scan_n;
    let nb = (scan_n + SCAN_BLOCK - 1u) / SCAN_BLOCK;
    let n = i % ds;
    let r = i / ds;
    let d = r % params.d_inner;
    let r2 = r / params.d_inner;
    let c = r2 % scan_n;
    let sb = r2 / scan_n;
    let blk = c / SCAN_BLOCK;
    if (blk == 0u) {
        return;
    }
    let A = -exp(A_log[d * ds + n]);
    let ie = s_idx(sb, scan_n, c, d);
    let carry = scan_states[params.off_agg_S + s_idx(sb, nb, blk - 1u, d) * ds + n];
    let s = scan_dt_sums[params.off_out_s + ie];
    let o = params.off_out_S + ie * ds + n;
    scan_states[o] = scan_states[o] + exp(A * s) * carry;
}

// ---------------------------------------------------------------- backward

// Backward pass 1: per (batch, chunk, d): the forward summary (set 0, as
// s6_fwd_summary) and the reverse summary of the adjoint (set 1, chunk order
// flipped): the adjoint handed out, Ā_{t0}·g_{t0}, with g from zero at the chunk's end.
@compute @workgroup_size(64)
fn s6_bwd_summary(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let ln = chunk_lane(wid, nwg, lid, params.n_chunks);
    if (!ln.ok) {
        return;  // no barriers in this entry point
    }
    let ds = d_state();
    let n_chunks = params.n_chunks;
    let t0 = ln.c * params.chunk_len;
    let t1 = min(t0 + params.chunk_len, params.seq_len);
    let zoh = is_zoh();
    let n_tiles = state_tiles();
    let rc = n_chunks - 1u - ln.c;
    // With FLAG_ADJOINT_ONLY (the forward's h stored, or its checkpoints) only the adjoint
    // summaries are needed; they are then scan set b instead of batch + b.
    let fwd = (params.flags & FLAG_ADJOINT_ONLY) == 0u;
    let rset = select(ln.b, params.batch + ln.b, fwd);
    var ssum = 0.0;
    for (var tile = 0u; tile < n_tiles; tile++) {
        let n0 = tile * TILE;
        let bt = bc_tile(n0);
        let ta = tile_a(ln.d, n0);
        var h0 = vec4<f32>(0.0);
        var h1 = vec4<f32>(0.0);
        var h2 = vec4<f32>(0.0);
        var h3 = vec4<f32>(0.0);
        var sacc = 0.0;
        var nx = load_step(ln.b, min(t0, t1 - 1u), ln.d, bt, false);
        for (var t = t0; t < select(t0, t1, fwd); t++) {
            let cur = nx;
            nx = load_step(ln.b, min(t + 1u, t1 - 1u), ln.d, bt, false);
            let dt = softplus(cur.z);
            let uv = cur.u;
            sacc = sacc + dt;
            h0 = fwd_q(h0, ta.E0, ta.iA0, dt, cur.b0, uv, zoh);
            h1 = fwd_q(h1, ta.E1, ta.iA1, dt, cur.b1, uv, zoh);
            h2 = fwd_q(h2, ta.E2, ta.iA2, dt, cur.b2, uv, zoh);
            h3 = fwd_q(h3, ta.E3, ta.iA3, dt, cur.b3, uv, zoh);
        }
        // g here is Ā_t·g_t, the amount handed to step t-1.
        var g0 = vec4<f32>(0.0);
        var g1 = vec4<f32>(0.0);
        var g2 = vec4<f32>(0.0);
        var g3 = vec4<f32>(0.0);
        var racc = 0.0;
        var tt = t1;
        // Two steps an iteration when two remain: their loads and exps are independent.
        for (; tt >= t0 + 2u; tt -= 2u) {
            let ia = act_idx(ln.b, tt - 1u, ln.d);
            let ib = act_idx(ln.b, tt - 2u, ln.d);
            let dt_a = softplus(delta_raw(ia, ln.d));
            let dt_b = softplus(delta_raw(ib, ln.d));
            let dya = dy[ia];
            let dyb = dy[ib];
            let ra = bc_row(ln.b, tt - 1u);
            let rb2 = bc_row(ln.b, tt - 2u);
            let ca0 = ld_C4(ra, bt, 0u);
            let ca1 = ld_C4(ra, bt, 1u);
            let ca2 = ld_C4(ra, bt, 2u);
            let ca3 = ld_C4(ra, bt, 3u);
            let cb0 = ld_C4(rb2, bt, 0u);
            let cb1 = ld_C4(rb2, bt, 1u);
            let cb2 = ld_C4(rb2, bt, 2u);
            let cb3 = ld_C4(rb2, bt, 3u);
            let ea0 = exp2(dt_a * ta.E0);
            let ea1 = exp2(dt_a * ta.E1);
            let ea2 = exp2(dt_a * ta.E2);
            let ea3 = exp2(dt_a * ta.E3);
            let eb0 = exp2(dt_b * ta.E0);
            let eb1 = exp2(dt_b * ta.E1);
            let eb2 = exp2(dt_b * ta.E2);
            let eb3 = exp2(dt_b * ta.E3);
            racc = racc + dt_a;
            racc = racc + dt_b;
            g0 = eb0 * (cb0 * dyb + ea0 * (ca0 * dya + g0));
            g1 = eb1 * (cb1 * dyb + ea1 * (ca1 * dya + g1));
            g2 = eb2 * (cb2 * dyb + ea2 * (ca2 * dya + g2));
            g3 = eb3 * (cb3 * dyb + ea3 * (ca3 * dya + g3));
        }
        if (tt > t0) {
            let t = tt - 1u;
            let i = act_idx(ln.b, t, ln.d);
            let dt = softplus(delta_raw(i, ln.d));
            racc = racc + dt;
            let dyv = dy[i];
            let bb = bc_row(ln.b, t);
            g0 = exp2(dt * ta.E0) * (ld_C4(bb, bt, 0u) * dyv + g0);
            g1 = exp2(dt * ta.E1) * (ld_C4(bb, bt, 1u) * dyv + g1);
            g2 = exp2(dt * ta.E2) * (ld_C4(bb, bt, 2u) * dyv + g2);
            g3 = exp2(dt * ta.E3) * (ld_C4(bb, bt, 3u) * dyv + g3);
        }
        ssum = select(racc, sacc, fwd);
        let rb = params.off_in_S + s_idx(rset, n_chunks, rc, ln.d) * ds;
        if (fwd) {
            let fb = params.off_in_S + s_idx(ln.b, n_chunks, ln.c, ln.d) * ds;
            st_S4(fb, n0, h0);
            st_S4(fb, n0 + 4u, h1);
            st_S4(fb, n0 + 8u, h2);
            st_S4(fb, n0 + 12u, h3);
        }
        st_S4(rb, n0, g0);
        st_S4(rb, n0 + 4u, g1);
        st_S4(rb, n0 + 8u, g2);
        st_S4(rb, n0 + 12u, g3);
    }
    if (fwd) {
        scan_dt_sums[params.off_in_s + s_idx(ln.b, n_chunks, ln.c, ln.d)] = ssum;
    }
    scan_dt_sums[params.off_in_s + s_idx(rset, n_chunks, rc, ln.d)] = ssum;
}

// Index of vec4 q (0..7: dB then dC) of lane `lane` in bc_smem.
fn sm_at(lane: u32, q: u32) -> u32 {
    return lane * SM_ROW + ((q + lane) & 7u);
}

// #if subgroups
// Lanes whose dB | dC s6_bwd_output sums into one partial row (a power of two <= 32): a
// pipeline constant, not a Params field, so that the reduce-scatter below has no branches
// left and its lane arithmetic folds (see families/s6/NOTES.md, 'Fifth round').
override SG_GROUP: u32 = 32u;

// dB | dC of one step summed over G = SG_GROUP lanes of a subgroup (consecutive channels
// of one chunk) with no workgroup memory and no barrier: a reduce-scatter. Each halving
// keeps half of what a lane holds, sends the other half to the lane `o` away and adds what
// comes back (keep + received, the same order on every run), so after log2(G) halvings a
// lane holds 32 / G of the 32 sums, which it stores to partial row `row` (= d / G). `ok`
// is false for a step past the chunk or the sequence, and when the pipeline's subgroups
// are smaller than the host assumed (then the rows keep their poison: a visible failure).
fn sg_half4(lo: vec4<f32>, hi: vec4<f32>, upper: bool, o: u32) -> vec4<f32> {
    return select(lo, hi, upper) + subgroupShuffleXor(select(hi, lo, upper), o);
}

// Component c of vec4 slot q (0..3 dB, 4..7 dC; states n0 + 4·(q % 4) + c).
fn st_sum1(ok: bool, rb: u32, q: u32, c: u32, n0: u32, v: f32) {
    let n = n0 + (q % 4u) * 4u + c;
    if (ok && n < d_state()) {
        partials[rb + (q / 4u) * params.batch * params.seq_len * d_state() + n] = v;
    }
}

fn st_sum4(ok: bool, rb: u32, q: u32, n0: u32, v: vec4<f32>) {
    st_sum1(ok, rb, q, 0u, n0, v.x);
    st_sum1(ok, rb, q, 1u, n0, v.y);
    st_sum1(ok, rb, q, 2u, n0, v.z);
    st_sum1(ok, rb, q, 3u, n0, v.w);
}

fn sg_bc_store(ok: bool, row: u32, b: u32, t: u32, n0: u32, lane: u32, q0: vec4<f32>,
               q1: vec4<f32>, q2: vec4<f32>, q3: vec4<f32>, q4: vec4<f32>, q5: vec4<f32>,
               q6: vec4<f32>, q7: vec4<f32>) {
    let G = SG_GROUP;  // a pipeline constant: the branches below fold away
    let rb = row * 2u * params.batch * params.seq_len * d_state() + bc_idx(b, t, 0u);
    if (G == 1u) {
        st_sum4(ok, rb, 0u, n0, q0);
        st_sum4(ok, rb, 1u, n0, q1);
        st_sum4(ok, rb, 2u, n0, q2);
        st_sum4(ok, rb, 3u, n0, q3);
        st_sum4(ok, rb, 4u, n0, q4);
        st_sum4(ok, rb, 5u, n0, q5);
        st_sum4(ok, rb, 6u, n0, q6);
        st_sum4(ok, rb, 7u, n0, q7);
        return;
    }
    // 8 vec4s -> 4: the lower lane keeps slots 0..3, the upper 4..7.
    var o = G / 2u;
    var up = (lane & o) != 0u;
    let s0 = sg_half4(q0, q4, up, o);
    let s1 = sg_half4(q1, q5, up, o);
    let s2 = sg_half4(q2, q6, up, o);
    let s3 = sg_half4(q3, q7, up, o);
    var qb = select(0u, 4u, up);  // first slot this lane now holds
    if (G == 2u) {
        st_sum4(ok, rb, qb, n0, s0);
        st_sum4(ok, rb, qb + 1u, n0, s1);
        st_sum4(ok, rb, qb + 2u, n0, s2);
        st_sum4(ok, rb, qb + 3u, n0, s3);
        return;
    }
    o = G / 4u;  // 4 -> 2
    up = (lane & o) != 0u;
    let t0 = sg_half4(s0, s2, up, o);
    let t1 = sg_half4(s1, s3, up, o);
    qb += select(0u, 2u, up);
    if (G == 4u) {
        st_sum4(ok, rb, qb, n0, t0);
        st_sum4(ok, rb, qb + 1u, n0, t1);
        return;
    }
    o = G / 8u;  // 2 -> 1
    up = (lane & o) != 0u;
    let w = sg_half4(t0, t1, up, o);
    qb += select(0u, 1u, up);
    if (G == 8u) {
        st_sum4(ok, rb, qb, n0, w);
        return;
    }
    o = G / 16u;  // vec4 -> vec2: components 0, 1 or 2, 3
    up = (lane & o) != 0u;
    let p = select(w.xy, w.zw, up) + subgroupShuffleXor(select(w.zw, w.xy, up), o);
    let cb = select(0u, 2u, up);
    if (G == 16u) {
        st_sum1(ok, rb, qb, cb, n0, p.x);
        st_sum1(ok, rb, qb, cb + 1u, n0, p.y);
        return;
    }
    o = G / 32u;  // vec2 -> one float (G = 32, the largest the host asks for)
    up = (lane & o) != 0u;
    let x = select(p.x, p.y, up) + subgroupShuffleXor(select(p.y, p.x, up), o);
    st_sum1(ok, rb, qb, cb + select(0u, 1u, up), n0, x);
}
// #endif

// Backward pass 3: per (batch, group of k_chunks chunks, d). Writes du, ddelta,
// dB/dC partials per d-block, and dA_log/dD/ddelta_bias partials per (batch, group).
@compute @workgroup_size(64)
fn s6_bwd_output(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
// #if subgroups
    @builtin(subgroup_size) sg_size: u32,
// #endif
) {
    let ln = chunk_lane(wid, nwg, lid, params.n_kgroups);
    let ok = ln.ok;
    // Predicated, never returned: the loops below hold barriers.
    let b = select(0u, ln.b, ln.wok && ln.b < params.batch);
    let d = select(0u, ln.d, ok);
    let ds = d_state();
    let n_chunks = params.n_chunks;
    let chunk_len = params.chunk_len;
    // sub-chunks per chunk (uniform: barriers in the loop)
    let nsub = (chunk_len + SUB - 1u) / SUB;
    let zoh = is_zoh();
    let ckpt = has_ckpt();  // sub-chunk starts from the forward's checkpoints
    let n_tiles = state_tiles();
    let lanes_c = WORKGROUP / params.wg_d;  // chunk lanes per workgroup
    let d_skip = D[d];
    let bc_cols = params.batch * params.seq_len * ds;  // columns of one of dB, dC in the partials
    var dD_acc = 0.0;
    var ddb_acc = 0.0;
    for (var tile = 0u; tile < n_tiles; tile++) {
        let n0 = tile * TILE;
        let bt = bc_tile(n0);
        let ta = tile_a(d, n0);
        var dA0 = vec4<f32>(0.0);
        var dA1 = vec4<f32>(0.0);
        var dA2 = vec4<f32>(0.0);
        var dA3 = vec4<f32>(0.0);
        for (var kk = 0u; kk < params.k_chunks; kk++) {
            let kslot = params.k_chunks - 1u - kk;
            let c_raw = ln.c * params.k_chunks + kslot;
            let cok = ok && c_raw < n_chunks;
            let c = select(0u, c_raw, cok);
            let t0 = c * chunk_len;
            let nsteps = select(0u, min(chunk_len, params.seq_len - min(t0, params.seq_len)), cok);
            // Chunk-start state (forward set) and adjoint handed in from the right (reverse set).
            var h0 = vec4<f32>(0.0);
            var h1 = vec4<f32>(0.0);
            var h2 = vec4<f32>(0.0);
            var h3 = vec4<f32>(0.0);
            var gc0 = vec4<f32>(0.0);
            var gc1 = vec4<f32>(0.0);
            var gc2 = vec4<f32>(0.0);
            var gc3 = vec4<f32>(0.0);
            let rc = n_chunks - 1u - c;
            if (cok && c > 0u && !ckpt) {
                let cr = carry_ref(b, c - 1u, d);
                h0 = ld_carry4(cr, n0, ta.E0);
                h1 = ld_carry4(cr, n0 + 4u, ta.E1);
                h2 = ld_carry4(cr, n0 + 8u, ta.E2);
                h3 = ld_carry4(cr, n0 + 12u, ta.E3);
            }
            if (cok && rc > 0u) {
                // With checkpoints the scan holds the adjoint summaries alone (set b).
                let cr = carry_ref(select(params.batch + b, b, ckpt), rc - 1u, d);
                gc0 = ld_carry4(cr, n0, ta.E0);
                gc1 = ld_carry4(cr, n0 + 4u, ta.E1);
                gc2 = ld_carry4(cr, n0 + 8u, ta.E2);
                gc3 = ld_carry4(cr, n0 + 12u, ta.E3);
            }
            // Sweep the chunk up to its last sub-chunk, keeping the state every SUB steps
            // (no barriers here: the bound may differ per thread).
            // <= 4 sub-chunks (chunk_len <= 32 without the forward's checkpoints) x 4 vec4
            var ckpts: array<vec4<f32>, 16>;
            let nck = select(min(nsteps, SUB * (nsub - 1u)), 0u, ckpt);
            for (var jc = 0u; jc <= nck; jc++) {
                if (jc % SUB == 0u) {
                    let q = (jc / SUB) * 4u;
                    ckpts[q] = h0;
                    ckpts[q + 1u] = h1;
                    ckpts[q + 2u] = h2;
                    ckpts[q + 3u] = h3;
                }
                if (jc < nck) {
                    let i = act_idx(b, t0 + jc, d);
                    let dt = softplus(delta_raw(i, d));
                    let uv = u[i];
                    let bb = bc_row(b, t0 + jc);
                    h0 = fwd_q(h0, ta.E0, ta.iA0, dt, ld_B4(bb, bt, 0u), uv, zoh);
                    h1 = fwd_q(h1, ta.E1, ta.iA1, dt, ld_B4(bb, bt, 1u), uv, zoh);
                    h2 = fwd_q(h2, ta.E2, ta.iA2, dt, ld_B4(bb, bt, 2u), uv, zoh);
                    h3 = fwd_q(h3, ta.E3, ta.iA3, dt, ld_B4(bb, bt, 3u), uv, zoh);
                }
            }
            var nk0 = vec4<f32>(0.0);
            var nk1 = vec4<f32>(0.0);
            var nk2 = vec4<f32>(0.0);
            var nk3 = vec4<f32>(0.0);
            if (ckpt) {
                let sl = nsub - 1u;
                let has = sl * SUB < nsteps;
                let tsl = t0 + select(0u, sl * SUB, has);
                nk0 = select(vec4<f32>(0.0), ld_start4(b, tsl, d, n0), has);
                nk1 = select(vec4<f32>(0.0), ld_start4(b, tsl, d, n0 + 4u), has);
                nk2 = select(vec4<f32>(0.0), ld_start4(b, tsl, d, n0 + 8u), has);
                nk3 = select(vec4<f32>(0.0), ld_start4(b, tsl, d, n0 + 12u), has);
            }
            for (var sub1 = nsub; sub1 > 0u; sub1--) {
                let sub = sub1 - 1u;
                // Recompute this sub-chunk, keeping h_{t-1} of each step.
                var hist: array<vec4<f32>, 32>;
                if (ckpt) {
                    // chunk_len is a multiple of SUB here (the runner's condition).
                    h0 = nk0;
                    h1 = nk1;
                    h2 = nk2;
                    h3 = nk3;
                    // The next sub-chunk's start, loaded a sub-chunk ahead (its DRAM latency
                    // was on every sub-chunk's critical path). Written out like the loads
                    // before the loop, not in a helper (families/s6/NOTES.md, 'Fifth round').
                    let sp = max(sub, 1u) - 1u;
                    let has = sp * SUB < nsteps && sub > 0u;
                    let tsp = t0 + select(0u, sp * SUB, has);
                    nk0 = select(vec4<f32>(0.0), ld_start4(b, tsp, d, n0), has);
                    nk1 = select(vec4<f32>(0.0), ld_start4(b, tsp, d, n0 + 4u), has);
                    nk2 = select(vec4<f32>(0.0), ld_start4(b, tsp, d, n0 + 8u), has);
                    nk3 = select(vec4<f32>(0.0), ld_start4(b, tsp, d, n0 + 12u), has);
                } else {
                    h0 = ckpts[sub * 4u];
                    h1 = ckpts[sub * 4u + 1u];
                    h2 = ckpts[sub * 4u + 2u];
                    h3 = ckpts[sub * 4u + 3u];
                }
                // The reverse sweep's per-step scalars, loaded here: dy's load is then not
                // on the reverse sweep's critical path, and softplus runs once per step.
                var dy_hist: array<f32, SUB>;
                var z_hist: array<f32, SUB>;
                var dt_hist: array<f32, SUB>;
                var u_hist: array<f32, SUB>;
                for (var j = 0u; j < SUB; j++) {
                    hist[j * 4u] = h0;
                    hist[j * 4u + 1u] = h1;
                    hist[j * 4u + 2u] = h2;
                    hist[j * 4u + 3u] = h3;
                    let jt = sub * SUB + j;
                    // Loads unconditional (a step past the chunk reads step t0 and keeps h):
                    // the driver can then issue them ahead of the h chain.
                    let v = jt < nsteps;
                    let tv = t0 + select(0u, jt, v);
                    let i = act_idx(b, tv, d);
                    let zz = delta_raw(i, d);
                    let dt = softplus(zz);
                    let uv = u[i];
                    dy_hist[j] = dy[i];
                    z_hist[j] = zz;
                    dt_hist[j] = dt;
                    u_hist[j] = uv;
                    let bb = bc_row(b, tv);
                    h0 = select(h0, fwd_q(h0, ta.E0, ta.iA0, dt, ld_B4(bb, bt, 0u), uv, zoh), v);
                    h1 = select(h1, fwd_q(h1, ta.E1, ta.iA1, dt, ld_B4(bb, bt, 1u), uv, zoh), v);
                    h2 = select(h2, fwd_q(h2, ta.E2, ta.iA2, dt, ld_B4(bb, bt, 2u), uv, zoh), v);
                    h3 = select(h3, fwd_q(h3, ta.E3, ta.iA3, dt, ld_B4(bb, bt, 3u), uv, zoh), v);
                }
                // Reverse sweep of the sub-chunk with the adjoint.
                for (var j1 = SUB; j1 > 0u; j1--) {
                    let j = j1 - 1u;
                    let jt = sub * SUB + j;
                    let v = jt < nsteps;
                    let t = t0 + select(0u, jt, v);
                    let i = act_idx(b, t, d);
                    let z = z_hist[j];
                    let dt = dt_hist[j];
                    let uv = u_hist[j];
                    let dyv = dy_hist[j];
                    let bb = bc_row(b, t);
                    let r0 = bwd_q(hist[j * 4u], ta.A0, ta.E0, ta.iA0, gc0, ld_B4(bb, bt, 0u),
                                   ld_C4(bb, bt, 0u), dt, uv, dyv, zoh);
                    let r1 = bwd_q(hist[j * 4u + 1u], ta.A1, ta.E1, ta.iA1, gc1, ld_B4(bb, bt, 1u),
                                   ld_C4(bb, bt, 1u), dt, uv, dyv, zoh);
                    let r2 = bwd_q(hist[j * 4u + 2u], ta.A2, ta.E2, ta.iA2, gc2, ld_B4(bb, bt, 2u),
                                   ld_C4(bb, bt, 2u), dt, uv, dyv, zoh);
                    let r3 = bwd_q(hist[j * 4u + 3u], ta.A3, ta.E3, ta.iA3, gc3, ld_B4(bb, bt, 3u),
                                   ld_C4(bb, bt, 3u), dt, uv, dyv, zoh);
                    let zero = vec4<f32>(0.0);
                    if (v) {
                        gc0 = r0.gc;
                        gc1 = r1.gc;
                        gc2 = r2.gc;
                        gc3 = r3.gc;
                        dA0 = dA0 + r0.dA;
                        dA1 = dA1 + r1.dA;
                        dA2 = dA2 + r2.dA;
                        dA3 = dA3 + r3.dA;
                        let ddz = put_du_ddelta(i, tile == 0u, d_skip * dyv, z, r0, r1, r2, r3);
                        if (tile == 0u) {
                            dD_acc = dD_acc + dyv * uv;
                        }
                        ddb_acc = ddb_acc + ddz;
                    }
// #if subgroups
                    // This step's dB | dC summed over the subgroup's lanes of this chunk.
                    let tt = c_raw * chunk_len + jt;
                    let gv = ln.wok && ln.b < params.batch && c_raw < n_chunks && jt < chunk_len
                             && tt < params.seq_len;
                    sg_bc_store(gv && sg_size >= SG_GROUP, ln.d / SG_GROUP, ln.b, tt, n0,
                                lid % SG_GROUP, select(zero, r0.dB, v),
                                select(zero, r1.dB, v), select(zero, r2.dB, v),
                                select(zero, r3.dB, v), select(zero, r0.dC, v),
                                select(zero, r1.dC, v), select(zero, r2.dC, v),
                                select(zero, r3.dC, v));
// #else
                    bc_smem[sm_at(lid, 0u)] = select(zero, r0.dB, v);
                    bc_smem[sm_at(lid, 1u)] = select(zero, r1.dB, v);
                    bc_smem[sm_at(lid, 2u)] = select(zero, r2.dB, v);
                    bc_smem[sm_at(lid, 3u)] = select(zero, r3.dB, v);
                    bc_smem[sm_at(lid, 4u)] = select(zero, r0.dC, v);
                    bc_smem[sm_at(lid, 5u)] = select(zero, r1.dC, v);
                    bc_smem[sm_at(lid, 6u)] = select(zero, r2.dC, v);
                    bc_smem[sm_at(lid, 7u)] = select(zero, r3.dC, v);
                    workgroupBarrier();
                    if (params.wg_d >= 8u) {
                        // Two levels, in a fixed order: every invocation sums 8 lanes of one
                        // vec4 column (4 states of dB or dC of this step) into bc_part; after
                        // the barrier, one invocation per column sums the wg_d / 8 partials.
                        // (One level took 64 dependent loads on 8 invocations while the other
                        // 56 waited.)
                        let per = params.wg_d / 8u;  // partials per column
                        let col1 = lid / per;  // lanes_c * 8 columns of per each
                        let part = lid % per;
                        let cg1 = col1 / 8u;
                        let kv1 = col1 % 8u;
                        let la = cg1 * params.wg_d + part * 8u;
                        var s0 = bc_smem[sm_at(la, kv1)] + bc_smem[sm_at(la + 1u, kv1)];
                        var s1 = bc_smem[sm_at(la + 2u, kv1)] + bc_smem[sm_at(la + 3u, kv1)];
                        s0 += bc_smem[sm_at(la + 4u, kv1)] + bc_smem[sm_at(la + 5u, kv1)];
                        s1 += bc_smem[sm_at(la + 6u, kv1)] + bc_smem[sm_at(la + 7u, kv1)];
                        bc_part[lid] = s0 + s1;
                    }
                    workgroupBarrier();
                    for (var o = lid; o < lanes_c * 8u; o += WORKGROUP) {
                        let cg = o / 8u;
                        let kv = o % 8u;  // vec4 column: dB (0..3) or dC (4..7)
                        let cc = (ln.grp * lanes_c + cg) * params.k_chunks + kslot;
                        let tt = cc * chunk_len + jt;
                        var acc = vec4<f32>(0.0);
                        if (params.wg_d >= 8u) {
                            let per = params.wg_d / 8u;
                            for (var k = 0u; k < per; k++) {
                                acc += bc_part[o * per + k];
                            }
                        } else {
                            for (var l = 0u; l < params.wg_d; l++) {
                                acc += bc_smem[sm_at(cg * params.wg_d + l, kv)];
                            }
                        }
                        if (ln.wok && cc < n_chunks && jt < chunk_len && tt < params.seq_len) {
                            let n = n0 + (kv % 4u) * 4u;
                            let col = (kv / 4u) * bc_cols + bc_idx(ln.b, tt, 0u);
                            let rb = ln.dblk * 2u * bc_cols + col;
                            if (n < ds) { partials[rb + n] = acc.x; }
                            if (n + 1u < ds) { partials[rb + n + 1u] = acc.y; }
                            if (n + 2u < ds) { partials[rb + n + 2u] = acc.z; }
                            if (n + 3u < ds) { partials[rb + n + 3u] = acc.w; }
                        }
                    }
                    if (params.wg_d < 8u) {  // uniform; only then did this read bc_smem
                        workgroupBarrier();
                    }
// #endif
                }
            }
        }
        if (ok) {
            st_dA_par(ln.b * params.n_kgroups + ln.c, d, n0, ta, dA0, dA1, dA2, dA3);
        }
    }
    if (ok) {
        st_dd_par(ln.b * params.n_kgroups + ln.c, d, dD_acc, ddb_acc);
    }
}

// h_{t-1} of states n..n+3 of channel d at step t (0 at t = 0), from the stored h.
fn ld_hprev4(b: u32, t: u32, d: u32, n: u32) -> vec4<f32> {
    if (t == 0u) {
        return vec4<f32>(0.0);
    }
    let ds = d_state();
    let base = act_idx(b, t - 1u, d) * ds;
    let last = base + ds - 1u;
    return vec4<f32>(
        select(0.0, h_out[min(base + n, last)], n < ds),
        select(0.0, h_out[min(base + n + 1u, last)], n + 1u < ds),
        select(0.0, h_out[min(base + n + 2u, last)], n + 2u < ds),
        select(0.0, h_out[min(base + n + 3u, last)], n + 3u < ds),
    );
}

// This channel's share of dB or dC (sel 0 / 1) of states n..n+3 at (b, t) (n a multiple of
// 4): its own row d of the partials, summed over d by s6_reduce_bc. States past d_state are
// 0 here (B, C and h are 0 there) and never read out.
fn st_bc4(d: u32, sel: u32, b: u32, t: u32, n: u32, v: vec4<f32>) {
    let q4 = bc_q4();
    if (n / 4u < q4) {
        let rows = params.batch * params.seq_len * q4;  // vec4s of one of dB, dC
        partials4_rw[(2u * d + sel) * rows + bc_row(b, t) + n / 4u] = v;
    }
}

// Backward pass 3 when the forward stored every h (the app's runs): per (batch, group of
// k_chunks chunks, d), one reverse sweep of each chunk with the adjoint carried in from the
// reverse scan (set b); h_{t-1} is read, not recomputed, and every channel writes its own
// dB/dC row (no workgroup exchange, no barriers). Used while those rows stay small (the
// runner's BWD_STORED_MAX_BYTES); writes du, ddelta and the same dA_log/dD/ddelta_bias
// partials as s6_bwd_output.
@compute @workgroup_size(64)
fn s6_bwd_output_h(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let ln = chunk_lane(wid, nwg, lid, params.n_kgroups);
    if (!ln.ok) {
        return;  // no barriers in this entry point
    }
    let b = ln.b;
    let d = ln.d;
    let ds = d_state();
    let n_chunks = params.n_chunks;
    let chunk_len = params.chunk_len;
    let zoh = is_zoh();
    let n_tiles = state_tiles();
    let d_skip = D[d];
    var dD_acc = 0.0;
    var ddb_acc = 0.0;
    for (var tile = 0u; tile < n_tiles; tile++) {
        let n0 = tile * TILE;
        let bt = bc_tile(n0);
        let ta = tile_a(d, n0);
        var dA0 = vec4<f32>(0.0);
        var dA1 = vec4<f32>(0.0);
        var dA2 = vec4<f32>(0.0);
        var dA3 = vec4<f32>(0.0);
        for (var kk = 0u; kk < params.k_chunks; kk++) {
            let c = ln.c * params.k_chunks + params.k_chunks - 1u - kk;
            if (c >= n_chunks) {
                continue;
            }
            let t0 = c * chunk_len;
            let t1 = min(t0 + chunk_len, params.seq_len);
            var gc0 = vec4<f32>(0.0);
            var gc1 = vec4<f32>(0.0);
            var gc2 = vec4<f32>(0.0);
            var gc3 = vec4<f32>(0.0);
            let rc = n_chunks - 1u - c;
            if (rc > 0u) {
                let cr = carry_ref(b, rc - 1u, d);
                gc0 = ld_carry4(cr, n0, ta.E0);
                gc1 = ld_carry4(cr, n0 + 4u, ta.E1);
                gc2 = ld_carry4(cr, n0 + 8u, ta.E2);
                gc3 = ld_carry4(cr, n0 + 12u, ta.E3);
            }
            for (var tt = t1; tt > t0; tt--) {
                let t = tt - 1u;
                let i = act_idx(b, t, d);
                let z = delta_raw(i, d);
                let dt = softplus(z);
                let uv = u[i];
                let dyv = dy[i];
                let bb = bc_row(b, t);
                let r0 = bwd_q(ld_hprev4(b, t, d, n0), ta.A0, ta.E0, ta.iA0, gc0, ld_B4(bb, bt, 0u),
                               ld_C4(bb, bt, 0u), dt, uv, dyv, zoh);
                let r1 = bwd_q(ld_hprev4(b, t, d, n0 + 4u), ta.A1, ta.E1, ta.iA1, gc1,
                               ld_B4(bb, bt, 1u), ld_C4(bb, bt, 1u), dt, uv, dyv, zoh);
                let r2 = bwd_q(ld_hprev4(b, t, d, n0 + 8u), ta.A2, ta.E2, ta.iA2, gc2,
                               ld_B4(bb, bt, 2u), ld_C4(bb, bt, 2u), dt, uv, dyv, zoh);
                let r3 = bwd_q(ld_hprev4(b, t, d, n0 + 12u), ta.A3, ta.E3, ta.iA3, gc3,
                               ld_B4(bb, bt, 3u), ld_C4(bb, bt, 3u), dt, uv, dyv, zoh);
                gc0 = r0.gc;
                gc1 = r1.gc;
                gc2 = r2.gc;
                gc3 = r3.gc;
                dA0 = dA0 + r0.dA;
                dA1 = dA1 + r1.dA;
                dA2 = dA2 + r2.dA;
                dA3 = dA3 + r3.dA;
                st_bc4(d, 0u, b, t, n0, r0.dB);
                st_bc4(d, 0u, b, t, n0 + 4u, r1.dB);
                st_bc4(d, 0u, b, t, n0 + 8u, r2.dB);
                st_bc4(d, 0u, b, t, n0 + 12u, r3.dB);
                st_bc4(d, 1u, b, t, n0, r0.dC);
                st_bc4(d, 1u, b, t, n0 + 4u, r1.dC);
                st_bc4(d, 1u, b, t, n0 + 8u, r2.dC);
                st_bc4(d, 1u, b, t, n0 + 12u, r3.dC);
                let ddz = put_du_ddelta(i, tile == 0u, d_skip * dyv, z, r0, r1, r2, r3);
                if (tile == 0u) {
                    dD_acc = dD_acc + dyv * uv;
                }
                ddb_acc = ddb_acc + ddz;
            }
        }
        st_dA_par(b * params.n_kgroups + ln.c, d, n0, ta, dA0, dA1, dA2, dA3);
    }
    st_dd_par(b * params.n_kgroups + ln.c, d, dD_acc, ddb_acc);
}

// ---------------------------------------------------------------- reductions

// dB | dC = the sum over d of s6_bwd_output_h's per-channel rows, in row order: an
// invocation sums one vec4 (4 states of one (dB or dC, b, t)) and writes the states below
// d_state to out0 (dB) or out1 (dC).
@compute @workgroup_size(64)
fn s6_reduce_bc(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let q = wg_linear(wid, nwg) * WORKGROUP + lid;
    // vec4s of dB (then as many of dC) in a row
    let half = params.batch * params.seq_len * bc_q4();
    if (q >= 2u * half) {
        return;  // no barriers in this entry point
    }
    var acc = vec4<f32>(0.0);
    for (var r = 0u; r < params.red_rows; r++) {
        acc = acc + partials4[r * 2u * half + q];
    }
    let sel = q / half;
    let row = (q % half) / bc_q4();
    let n0 = (q % bc_q4()) * 4u;
    for (var k = 0u; k < 4u; k++) {
        let n = n0 + k;
        if (n < d_state()) {
            let o = row * d_state() + n;
            if (sel == 0u) {
                out0[o] = acc[k];
            } else {
                out1[o] = acc[k];
            }
        }
    }
}

// out[r', col] = Σ_{r in group r'} in[r, col], groups of 32 rows in fixed order.
@compute @workgroup_size(64)
fn s6_reduce_rows(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let i = wg_linear(wid, nwg) * WORKGROUP + lid;
    if (i >= params.n_threads) {
        return;  // no barriers in this entry point
    }
    let n_cols = params.red_cols;
    let col = i % n_cols;
    let orow = i / n_cols;
    let r0 = orow * SCAN_BLOCK;
    let r1 = min(r0 + SCAN_BLOCK, params.red_rows);
    var acc = 0.0;
    for (var r = r0; r < r1; r++) {
        acc = acc + partials[params.red_in + r * n_cols + col];
    }
    partials[params.red_out + orow * n_cols + col] = acc;
}

// Column col of the reduced rows to out0, out1 or out2 ([0, m0), [m0, m0 + m1), the rest).
fn st_final(col: u32, v: f32) {
    if (col < params.m0) {
        out0[col] = v;
    } else if (col < params.m0 + params.m1) {
        out1[col - params.m0] = v;
    } else {
        out2[col - params.m0 - params.m1] = v;
    }
}

// Last level: sum the remaining rows per column and scatter to up to three outputs.
@compute @workgroup_size(64)
fn s6_reduce_final(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let col = wg_linear(wid, nwg) * WORKGROUP + lid;
    let n_cols = params.red_cols;
    if (col >= n_cols) {
        return;  // no barriers in this entry point
    }
    var acc = 0.0;
    for (var r = 0u; r < params.red_rows; r++) {
        acc = acc + partials[params.red_in + r * n_cols + col];
    }
    st_final(col, acc);
}

// s6_reduce_final on whole vec4s (the runner's choice when red_cols and red_in are
// multiples of 4): the same additions in the same order, a quarter of the loads. It reads
// the rows through partials4, the read-only vec4 view of the same buffer.
@compute @workgroup_size(64)
fn s6_reduce_final4(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let c4 = wg_linear(wid, nwg) * WORKGROUP + lid;
    let n_cols4 = params.red_cols / 4u;
    if (c4 >= n_cols4) {
        return;  // no barriers in this entry point
    }
    let base = params.red_in / 4u;
    var acc = vec4<f32>(0.0);
    for (var r = 0u; r < params.red_rows; r++) {
        acc = acc + partials4[base + r * n_cols4 + c4];
    }
    for (var k = 0u; k < 4u; k++) {
        st_final(c4 * 4u + k, acc[k]);
    }
}
