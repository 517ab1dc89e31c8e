// Bandwidth ceiling for `ssmviz bench`: a grid-stride vec4 copy.
// Each invocation copies several vec4s (grid stride keeps every wave's accesses
// contiguous), so the figure is the memory system's, not launch overhead's.

struct Params {
    n_vec4: u32,       // number of vec4 elements to copy
    stride: u32,       // total invocations in the grid
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> src: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> dst: array<vec4<f32>>;

@compute @workgroup_size(256)
fn copy_vec4(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let start = (wid.x + wid.y * nwg.x) * 256u + lid;
    for (var i = start; i < params.n_vec4; i += params.stride) {
        dst[i] = src[i];
    }
}
