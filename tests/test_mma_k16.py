"""The m16n8k16 intrinsics (ms_pruner/mma_k16.py) played lane by lane: each ldmatrix load and each
mma.sync instruction against the tiles they must hold, TVM's m16n8k8 intrinsics played the same
way as the control."""

import itertools

import numpy as np


def _ldmatrix_x4(shared, addresses, trans):
    """What ``ldmatrix.x4`` gives each of 32 lanes (8 fp16 values, register by register) from the
    row addresses lanes 8m..8m+7 give for matrix m (PTX ISA: lane t receives row t/4, columns
    2(t%4) and 2(t%4)+1 of each 8x8 matrix, of its transpose with .trans)."""
    out = np.zeros((32, 8))
    for m in range(4):
        matrix = np.stack([shared[addresses[8 * m + r]: addresses[8 * m + r] + 8] for r in range(8)])
        matrix = matrix.T if trans else matrix
        for lane in range(32):
            out[lane, 2 * m: 2 * m + 2] = matrix[lane // 4, 2 * (lane % 4): 2 * (lane % 4) + 2]
    return out


def _mma_operands(registers_a, registers_b, offset_a, offset_b, k):
    """The 16 x k A and k x 8 B matrices one mma.sync m16n8k{k} reads from the lanes' registers at
    the given offsets (PTX ISA fragment layouts: lane t = 4g + c holds A rows g and g+8, B column g)."""
    a, b = np.zeros((16, k)), np.zeros((k, 8))
    for lane in range(32):
        g, c = divmod(lane, 4)
        va, vb = registers_a[lane, offset_a:], registers_b[lane, offset_b:]
        for half in range(k // 8):
            a[g, 8 * half + 2 * c: 8 * half + 2 * c + 2] = va[4 * half: 4 * half + 2]
            a[g + 8, 8 * half + 2 * c: 8 * half + 2 * c + 2] = va[4 * half + 2: 4 * half + 4]
            b[8 * half + 2 * c: 8 * half + 2 * c + 2, g] = vb[2 * half: 2 * half + 2]
    return a, b


def _fragments_hold_the_tiles(k, load_a, load_b, register_a, register_b, rows=64, depth=48, cols=96, b_n_major=False):
    """Load a warp's A (rows x depth) and B (depth x cols; stored cols x depth where ``b_n_major``)
    fragments tile by tile as the intrinsics' lanes do, then check that every mma of the warp tile
    reads exactly its sub-matrices."""
    rng = np.random.default_rng(k)
    shared_a, matrix_b = rng.standard_normal((rows, depth)), rng.standard_normal((depth, cols))
    shared_b = matrix_b.T.copy() if b_n_major else matrix_b
    registers_a, registers_b = np.full((32, rows * depth // 32), np.nan), np.full((32, depth * cols // 32), np.nan)
    for registers, shared, load, tile in ((registers_a, shared_a, load_a, (32, k)),
                                          (registers_b, shared_b, load_b, (32, k) if b_n_major else (k, 32))):
        for i in range(0, shared.shape[0], tile[0]):
            for j in range(0, shared.shape[1], tile[1]):
                for offset, lanes, trans in load(i, j, shared.shape[1]):
                    addresses = [i * shared.shape[1] + j + lane_address for lane_address in lanes]
                    registers[:, offset: offset + 8] = _ldmatrix_x4(shared.ravel(), addresses, trans)
    assert not np.isnan(registers_a).any() and not np.isnan(registers_b).any()
    for i, j, kk in itertools.product(range(0, rows, 16), range(0, cols, 8), range(0, depth, k)):
        b_offset = register_b(j, kk, depth) if b_n_major else register_b(kk, j, cols)
        a, b = _mma_operands(registers_a, registers_b, register_a(i, kk, depth), b_offset, k)
        assert np.array_equal(a, shared_a[i:i + 16, kk:kk + k]) and np.array_equal(b, matrix_b[kk:kk + k, j:j + 8])


def test_m16n8k16_fragments_hold_what_each_instruction_multiplies(tensor_intrinsics):
    """The m16n8k16 loads and instruction (mma_k16.py), played lane by lane with PTX's
    ldmatrix and mma.sync fragment layouts. TVM's m16n8k8 intrinsics, played the same way, are the
    control: a mistake in the playing would fail them too."""
    from tvm.s_tir.tensor_intrin import cuda

    from ms_pruner import mma_k16

    def k8_a(i, j, stride):
        return [(cuda.get_index_A(i * stride + j, stride), [lane * stride for lane in range(32)], False)]

    def k8_b(i, j, stride):
        return [(cuda.get_index_B(i * stride + j, stride), [(lane % 8) * stride + (lane // 8) * 8 for lane in range(32)], True)]

    _fragments_hold_the_tiles(8, k8_a, k8_b, lambda i, j, s: cuda.get_index_A(i * s + j, s),
                              lambda i, j, s: cuda.get_index_B(i * s + j, s))

    def k16_load(register, lane_address, trans):
        return lambda i, j, stride: [(register(i, j, stride) + 8 * half, [lane_address(lane, half, stride) for lane in range(32)],
                                      trans) for half in (0, 1)]

    _fragments_hold_the_tiles(16, k16_load(mma_k16.a_register, mma_k16.a_lane_address, False),
                              k16_load(mma_k16.b_register, mma_k16.b_lane_address, True),
                              mma_k16.a_register, mma_k16.b_register)
    # B stored n-major (a linear layer's weights): untransposed ldmatrix into the same registers.
    _fragments_hold_the_tiles(16, k16_load(mma_k16.a_register, mma_k16.a_lane_address, False),
                              k16_load(mma_k16.b_trans_register, mma_k16.b_trans_lane_address, False),
                              mma_k16.a_register, mma_k16.b_trans_register, b_n_major=True)
