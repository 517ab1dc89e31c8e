// A toy kernel family for the test suite: a first-order linear recurrence per channel,
//   h_t = a·h_{t-1} + b·x_t (h_{-1} = 0),  y_t = c·h_t,
// over x (batch, seq_len, d_inner) with a, b, c (d_inner,). toy_forward: one invocation
// per (batch, channel) walks the sequence. toy_backward: one invocation per channel walks
// every batch in reverse, g_t = c·dy_t + a·g_{t+1}, and sums da, db, dc in a fixed order.

struct Params {
    batch: u32,
    seq_len: u32,
    d_inner: u32,
    reverse: u32,  // 1: workgroups in reverse order (the check's race probe)
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> a: array<f32>;
@group(0) @binding(3) var<storage, read> b: array<f32>;
@group(0) @binding(4) var<storage, read> c: array<f32>;
@group(0) @binding(5) var<storage, read> dy: array<f32>;
@group(0) @binding(6) var<storage, read_write> y: array<f32>;
@group(0) @binding(7) var<storage, read_write> h: array<f32>;
@group(0) @binding(8) var<storage, read_write> dx: array<f32>;
@group(0) @binding(9) var<storage, read_write> da: array<f32>;
@group(0) @binding(10) var<storage, read_write> db: array<f32>;
@group(0) @binding(11) var<storage, read_write> dc: array<f32>;

fn invocation(wid: vec3<u32>, nwg: vec3<u32>, lid: vec3<u32>) -> u32 {
    var w = wid.x + wid.y * nwg.x;
    if (params.reverse == 1u) {
        w = nwg.x * nwg.y - 1u - w;
    }
    return w * 64u + lid.x;
}

@compute @workgroup_size(64)
fn toy_forward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_id) lid: vec3<u32>) {
    let i = invocation(wid, nwg, lid);
    let d_inner = params.d_inner;
    if (i >= params.batch * d_inner) {
        return;
    }
    let bi = i / d_inner;
    let d = i % d_inner;
    var state = 0.0;
    for (var t = 0u; t < params.seq_len; t++) {
        let k = (bi * params.seq_len + t) * d_inner + d;
        state = a[d] * state + b[d] * x[k];
        h[k] = state;
        y[k] = c[d] * state;
    }
}

@compute @workgroup_size(64)
fn toy_backward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_id) lid: vec3<u32>) {
    let d = invocation(wid, nwg, lid);
    let d_inner = params.d_inner;
    if (d >= d_inner) {
        return;
    }
    var sum_a = 0.0;
    var sum_b = 0.0;
    var sum_c = 0.0;
    for (var bi = 0u; bi < params.batch; bi++) {
        var g = 0.0;
        for (var s = 0u; s < params.seq_len; s++) {
            let t = params.seq_len - 1u - s;
            let k = (bi * params.seq_len + t) * d_inner + d;
            g = c[d] * dy[k] + a[d] * g;
            dx[k] = b[d] * g;
            sum_b += g * x[k];
            sum_c += dy[k] * h[k];
            if (t > 0u) {
                sum_a += g * h[k - d_inner];
            }
        }
    }
    da[d] = sum_a;
    db[d] = sum_b;
    dc[d] = sum_c;
}
