"""FP8 linears for the oracle, written from the format and recipe definitions (sharing no code with
the project): OCP FP8 E4M3 (bias 7, no infinities, S.1111.111 is NaN, max 448) and E5M2 (bias 15,
max 57344), round to nearest with ties to the even code, saturating (the GPU's satfinite cast);
per-tensor scales as Transformer Engine's recipes: tensorwise (scale = max / amax of the tensor
itself) and delayed (DelayedScaling: each step records every tensor's amax; at the step's end the
amax joins a history of `history_len` steps and the next step's scale is max / amax / 2^margin, amax
the history's most recent entry or its maximum; a zero or non-finite amax keeps the scale; scales
start at 1). The GEMMs: y = q(x sx) q(W sw)^T / (sx sw); dx = q(dy sdy) q(W sw) / (sdy sw);
dW = q(dy sdy)^T q(x sx) / (sdy sx) (or dy^T x without FP8 weight gradients)."""
import numpy as np
import torch

FORMATS = {"e4m3": (4, 3, 7), "e5m2": (5, 2, 15)}  # exponent bits, mantissa bits, bias


def positive_grid(fmt):
    """The format's non-negative finite values in code order (increasing): code = index."""
    e_bits, m_bits, bias = FORMATS[fmt]
    values = []
    for code in range(1 << (e_bits + m_bits)):
        e, m = code >> m_bits, code & ((1 << m_bits) - 1)
        if fmt == "e5m2" and e == (1 << e_bits) - 1:
            break  # infinities and NaNs
        if fmt == "e4m3" and e == (1 << e_bits) - 1 and m == (1 << m_bits) - 1:
            break  # the NaN
        if e == 0:
            values.append(m / 2.0 ** m_bits * 2.0 ** (1 - bias))
        else:
            values.append((1 + m / 2.0 ** m_bits) * 2.0 ** (e - bias))
    return np.array(values)


GRIDS = {fmt: positive_grid(fmt) for fmt in FORMATS}


def round_fp8(x, fmt):
    """x (a float64 tensor) rounded to the nearest value of the format, ties to the even code,
    saturated at the largest finite value."""
    grid = GRIDS[fmt]
    a = np.abs(x.detach().numpy())
    above = np.clip(np.searchsorted(grid, a), 1, len(grid) - 1)  # grid[above - 1] < a <= grid[above]
    low, high = grid[above - 1], grid[above]
    pick_high = (a - low > high - a) | ((a - low == high - a) & (above % 2 == 0))
    rounded = np.where(pick_high, high, low)
    rounded = np.where(a >= grid[-1], grid[-1], rounded)
    rounded = np.where(a == 0, 0.0, rounded)
    return torch.tensor(np.sign(x.detach().numpy()) * rounded, dtype=x.dtype)


class Fp8State:
    def __init__(self, fmt, recipe, margin=0, history_len=1, history_max=False, weight_gradient=True):
        self.forward_format = "e4m3"
        self.backward_format = "e5m2" if fmt == "hybrid" else "e4m3"
        self.recipe, self.margin, self.history_len, self.history_max = recipe, margin, history_len, history_max
        self.weight_gradient = weight_gradient
        self.scales, self.histories, self.step_amax = {}, {}, {}
        self.recording = False

    def format(self, role):
        return self.backward_format if role == "grad_output" else self.forward_format

    def _scale_from(self, amax, fmt, margin, previous):
        if not (amax > 0) or not np.isfinite(amax):
            return previous
        return GRIDS[fmt][-1] / amax / 2.0 ** margin

    def scale(self, key, role, tensor):
        amax = float(tensor.detach().abs().max())
        if self.recipe == "tensorwise":
            return self._scale_from(amax, self.format(role), 0, 1.0)
        if self.recording:
            self.step_amax[(key, role)] = max(self.step_amax.get((key, role), 0.0), amax)
        return self.scales.get((key, role), 1.0)

    def begin_step(self):
        self.recording = True
        self.step_amax = {}

    def end_step(self):
        self.recording = False
        if self.recipe != "delayed":
            return
        for (key, role), amax in self.step_amax.items():
            history = [amax] + self.histories.get((key, role), [0.0] * self.history_len)[: self.history_len - 1]
            self.histories[(key, role)] = history
            chosen = max(history) if self.history_max else history[0]
            self.scales[(key, role)] = self._scale_from(chosen, self.format(role), self.margin,
                                                        self.scales.get((key, role), 1.0))


class Fp8Linear(torch.autograd.Function):
    """y [rows, out] = x [rows, in] W^T with FP8 operands."""

    @staticmethod
    def forward(ctx, x, weight, state, key):
        sx, sw = state.scale(key, "input", x), state.scale(key, "weight", weight)
        xq, wq = round_fp8(x * sx, state.format("input")), round_fp8(weight * sw, state.format("weight"))
        ctx.save_for_backward(x, weight, xq, wq)
        ctx.state, ctx.key, ctx.sx, ctx.sw = state, key, sx, sw
        return xq @ wq.T / (sx * sw)

    @staticmethod
    def backward(ctx, grad):
        x, weight, xq, wq = ctx.saved_tensors
        state = ctx.state
        sg = state.scale(ctx.key, "grad_output", grad)
        gq = round_fp8(grad * sg, state.format("grad_output"))
        grad_x = gq @ wq / (sg * ctx.sw)
        grad_w = gq.T @ xq / (sg * ctx.sx) if state.weight_gradient else grad.T @ x
        return grad_x, grad_w, None, None
