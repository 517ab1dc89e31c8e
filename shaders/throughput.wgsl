// Arithmetic ceilings for `ssmviz bench`: how many FMAs and how many exp2s the device retires
// per second through WGSL. Each invocation runs 8 independent vec4 chains (enough independent
// work to hide the pipeline latency) for params.iters iterations of 2 steps each, so one
// invocation does 64 operations an iteration; the runtime-sized loop and the final store keep
// the compiler from folding or dropping the chains.

struct Params {
  iters: u32,
  pad0: u32,
  pad1: u32,
  pad2: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> sums: array<vec4<f32>>;

const WORKGROUP: u32 = 256u;

fn out_idx(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
  return (wid.x + wid.y * nwg.x) * WORKGROUP + lid;
}

// a <- a * 0.9999 + 1e-4: the chains stay near 1, never denormal or infinite.
@compute @workgroup_size(256)
fn fma_rate(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
  let s = f32(lid) * 1e-3;
  let m = vec4<f32>(0.9999);
  let c = vec4<f32>(1e-4);
  var a0 = vec4<f32>(s, s + 0.1, s + 0.2, s + 0.3);
  var a1 = a0 + 0.01;
  var a2 = a0 + 0.02;
  var a3 = a0 + 0.03;
  var a4 = a0 + 0.04;
  var a5 = a0 + 0.05;
  var a6 = a0 + 0.06;
  var a7 = a0 + 0.07;
  for (var k = 0u; k < params.iters; k++) {
    a0 = fma(fma(a0, m, c), m, c);
    a1 = fma(fma(a1, m, c), m, c);
    a2 = fma(fma(a2, m, c), m, c);
    a3 = fma(fma(a3, m, c), m, c);
    a4 = fma(fma(a4, m, c), m, c);
    a5 = fma(fma(a5, m, c), m, c);
    a6 = fma(fma(a6, m, c), m, c);
    a7 = fma(fma(a7, m, c), m, c);
  }
  sums[out_idx(wid, nwg, lid)] = ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7));
}

// e <- exp2(-e): from (0, 1] the chains stay in [0.5, 1] (negation is free on most GPUs).
@compute @workgroup_size(256)
fn exp2_rate(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) lid: u32) {
  let s = f32(lid) * 1e-3;
  var e0 = vec4<f32>(0.5 + s, 0.51 + s, 0.52 + s, 0.53 + s);
  var e1 = e0 + 0.01;
  var e2 = e0 + 0.02;
  var e3 = e0 + 0.03;
  var e4 = e0 + 0.04;
  var e5 = e0 + 0.05;
  var e6 = e0 + 0.06;
  var e7 = e0 + 0.07;
  for (var k = 0u; k < params.iters; k++) {
    e0 = exp2(-exp2(-e0));
    e1 = exp2(-exp2(-e1));
    e2 = exp2(-exp2(-e2));
    e3 = exp2(-exp2(-e3));
    e4 = exp2(-exp2(-e4));
    e5 = exp2(-exp2(-e5));
    e6 = exp2(-exp2(-e6));
    e7 = exp2(-exp2(-e7));
  }
  sums[out_idx(wid, nwg, lid)] = ((e0 + e1) + (e2 + e3)) + ((e4 + e5) + (e6 + e7));
}
