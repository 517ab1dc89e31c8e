// PLANTED FAULT: the line marked `planted fault` below differs from templated.wgsl.
// A templated source, as hosts that fill in constants before compiling write them:
// {{WG_SIZE}} is replaced by a number (here the profile's WG_SIZE = d_state) and the
// #ifdef HAS_D block is kept or dropped. Naga and Tint never see the template itself.
// One workgroup per (channel d, batch b); invocation n owns state n; after each step
// invocation 0 sums C_t[n] h_t[n] over the workgroup (in a fixed order: deterministic).
struct Params { batch: u32, seq_len: u32, d_inner: u32, d_state: u32, }
@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> u: array<f32>;       // (batch, seq_len, d_inner)
@group(0) @binding(2) var<storage, read> delta: array<f32>;   // (batch, seq_len, d_inner)
@group(0) @binding(3) var<storage, read> A_log: array<f32>;   // (d_inner, d_state)
@group(0) @binding(4) var<storage, read> B: array<f32>;       // (batch, seq_len, d_state)
@group(0) @binding(5) var<storage, read> C: array<f32>;       // (batch, seq_len, d_state)
@group(0) @binding(6) var<storage, read_write> y: array<f32>; // (batch, seq_len, d_inner)
#ifdef HAS_D
@group(0) @binding(7) var<storage, read> D: array<f32>;       // (d_inner,)
#endif

var<workgroup> c_h: array<f32, {{WG_SIZE}}>;

fn softplus(x: f32) -> f32 {
  if (x > 20.0) { return x; }
  let e = exp(x);
  if (e < 0.25) {  // log(1 + e) by its series: lavapipe's log is coarse near 1
    var term = e;
    var sum = 0.0;
    for (var k = 1u; k <= 10u; k = k + 1u) { sum = sum + term / f32(k); term = -term * e; }
    return sum;
  }
  return log(1.0 + e);
}

@compute @workgroup_size({{WG_SIZE}})
fn scan(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
  let d = wid.x;
  let b = wid.y;
  let n = lid.x;
  let L = params.seq_len;
  let DI = params.d_inner;
  let a = -exp(A_log[d * {{WG_SIZE}}u + n]);
  var h = 0.0;
  for (var t = 0u; t < L; t = t + 1u) {
    let i = (b * L + t) * DI + d;
    let bn = (b * L + t) * {{WG_SIZE}}u + n;
    let dt = softplus(delta[i]);
    h = exp(dt * a) * h + dt * B[bn] * u[i];
    c_h[n] = C[bn] * h;
    workgroupBarrier();
    if (n == 0u) {
      var acc = 0.0;
      for (var k = 1u; k < {{WG_SIZE}}u; k = k + 1u) { acc = acc + c_h[k]; }  // planted fault: skips state 0
#ifdef HAS_D
      acc = acc + D[d] * u[i];
#endif
      y[i] = acc;
    }
    workgroupBarrier();
  }
}
