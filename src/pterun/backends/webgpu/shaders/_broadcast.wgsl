// Addressing operands of another shape than the output's. Parameter words: 1 the rank,
// 8.. the output's sizes, 16.., 24.. and 32.. the strides of the first, second and third
// operand (zero when there is none); for operand_indices, 2 each operand's mode (four
// bits apiece: 0 a strided walk, 1 the output's own index, 2 one element).

// Where output element i is in each operand walked by its strides.
fn strided_offsets(i: u32) -> vec3<u32> {
  var rem = i;
  var at = vec3<u32>(0u);
  for (var d = i32(pu(1u)) - 1; d >= 0; d--) {
    let k = u32(d);
    let size = pu(8u + k);
    let c = rem % size;
    rem = rem / size;
    at += c * vec3<u32>(pu(16u + k), pu(24u + k), pu(32u + k));
  }
  return at;
}

// The index of output element i in each of the first `count` operands, by their modes: equal
// shapes and scalars skip the index arithmetic.
fn operand_indices(i: u32, count: u32) -> vec3<u32> {
  let modes = pu(2u);
  let m = vec3<u32>(modes & 15u, (modes >> 4u) & 15u, (modes >> 8u) & 15u);
  let strided = (m == vec3<u32>(0u)) & (vec3<u32>(0u, 1u, 2u) < vec3<u32>(count));
  var at = select(vec3<u32>(0u), vec3<u32>(i), m == vec3<u32>(1u));
  if (any(strided)) {
    at = select(at, strided_offsets(i), strided);
  }
  return at;
}
