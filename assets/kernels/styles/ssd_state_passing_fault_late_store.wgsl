// PLANTED FAULT: the line marked `planted fault` below differs from ssd_state_passing.wgsl.
// One stage of a chunked SSD (Mamba-2) forward: the STATE PASSING between chunks.
// Earlier stages computed, per chunk c, the state the chunk produces from a zero start
// (local_states) and the within-chunk cumulative sum of log A-bar (dA_cumsum). This
// stage carries the state across chunks:
//   passed[c] = state entering chunk c,  state <- exp(dA_cumsum[c, last]) state + local[c].
// Two entry points, run in the declared order: state_passing, then final_state.
struct Params { batch: u32, n_heads: u32, d_head: u32, d_state: u32, n_chunks: u32, chunk_len: u32, }
@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> local_states: array<f32>;  // (batch, n_chunks, n_heads, d_head, d_state)
@group(0) @binding(2) var<storage, read> dA_cumsum: array<f32>;     // (batch, n_heads, n_chunks, chunk_len)
@group(0) @binding(3) var<storage, read_write> passed: array<f32>;  // like local_states
@group(0) @binding(4) var<storage, read_write> ends: array<f32>;    // state at each chunk's end
@group(0) @binding(5) var<storage, read_write> final_state: array<f32>;  // (batch, n_heads, d_head, d_state)

@compute @workgroup_size(64)
fn state_passing(@builtin(global_invocation_id) gid: vec3<u32>) {
  let PN = params.d_head * params.d_state;
  let k = gid.x;  // p * d_state + n
  let h = gid.y;
  let b = gid.z;
  if (k >= PN) { return; }
  let H = params.n_heads;
  let NC = params.n_chunks;
  var state = 0.0;
  for (var c = 0u; c < NC; c = c + 1u) {
    let at = ((b * NC + c) * H + h) * PN + k;
    let decay = exp(dA_cumsum[((b * H + h) * NC + c) * params.chunk_len + params.chunk_len - 1u]);
    state = decay * state + local_states[at];
    passed[at] = state;  // planted fault: stores the state leaving the chunk
    ends[at] = state;
  }
}

@compute @workgroup_size(64)
fn final_state_copy(@builtin(global_invocation_id) gid: vec3<u32>) {
  let PN = params.d_head * params.d_state;
  let k = gid.x;
  let h = gid.y;
  let b = gid.z;
  if (k >= PN) { return; }
  let last = ((b * params.n_chunks + params.n_chunks - 1u) * params.n_heads + h) * PN + k;
  final_state[(b * params.n_heads + h) * PN + k] = ends[last];
}
