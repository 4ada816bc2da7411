"""The Cosmos-Predict2.5 sampling schedules: ``sigma_grid="karras"`` / ``"cosmos"`` and ``model_timesteps``.

References:
  * diffusers 0.42.1 ``UniPCMultistepScheduler`` in the configuration ``scripts/convert_cosmos_to_diffusers.py``
    (``save_pipeline_cosmos2_5_predict``) gives the converted folders: ``use_karras_sigmas=True,
    use_flow_sigmas=True, prediction_type="flow_prediction", sigma_max=200.0, sigma_min=0.01``; and
    ``pipelines/cosmos/pipeline_cosmos2_5_predict.py``, which feeds ``scheduler.sigmas[i]`` to the transformer.
  * the Cosmos-Predict2.5 repository (nvidia-cosmos/cosmos-predict2.5): ``cosmos_predict2/_src/predict2/models/
    fm_solvers_unipc.py`` ``FlowUniPCMultistepScheduler`` as ``text2world_model_rectified_flow.py`` constructs
    it (``num_train_timesteps=1000, shift=1, use_dynamic_shifting=False``) and calls it
    (``set_timesteps(num_steps=35, shift=5.0, use_kerras_sigma=config.use_kerras_sigma_at_inference)``, then
    ``step`` per int64 timestep); ``video2world_model_rectified_flow.py`` ``denoise`` (``conditional_frame_timestep``)
    and ``networks/minimal_v1_lvg_dit.py`` (``timesteps_B_T * timestep_scale``, 0.001). Restated below in
    :class:`CosmosRepositoryUniPC` and :func:`repository_network_timesteps` (torch, as the original).
"""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")

from vidax.schedulers import (  # noqa: E402
    FlowUniPCMultistepScheduler,
    SchedulerState,
    scale_timesteps,
    scheduler_from_config,
)

pytestmark = pytest.mark.filterwarnings("ignore:__array__ implementation:DeprecationWarning")  # diffusers, numpy 2

# scripts/convert_cosmos_to_diffusers.py, save_pipeline_cosmos2_5_predict
COSMOS_UNIPC = dict(use_karras_sigmas=True, use_flow_sigmas=True, prediction_type="flow_prediction",
                    sigma_max=200.0, sigma_min=0.01)


# --------------------------------------------------------------------------- the repository's sampler, restated


class CosmosRepositoryUniPC:
    """``fm_solvers_unipc.py`` ``FlowUniPCMultistepScheduler``, restated for the path Cosmos-Predict2.5 runs.

    Constructor as ``Text2WorldModelRectifiedFlow`` builds it (shift=1, no dynamic shifting) with the class
    defaults: solver_order 2, bh2, predict_x0, lower_order_final, disable_corrector [], final_sigmas_type
    "zero", flow_prediction, no thresholding, no solver_p. Operation for operation in torch float32.
    """

    def __init__(self, num_train_timesteps: int = 1000, shift: float = 1, solver_order: int = 2):
        self.num_train_timesteps = num_train_timesteps
        self.solver_order = solver_order
        self.shift = shift
        alphas = np.linspace(1, 1 / num_train_timesteps, num_train_timesteps)[::-1].copy()
        sigmas = 1.0 - alphas
        sigmas = torch.from_numpy(sigmas).to(dtype=torch.float32)
        sigmas = shift * sigmas / (1 + (shift - 1) * sigmas)
        self.sigma_min = sigmas[-1].item()
        self.sigma_max = sigmas[0].item()

    def set_timesteps(self, num_inference_steps: int, shift: float | None = None, use_kerras_sigma: bool = False):
        if use_kerras_sigma:
            # force to use the exact sigma used in edm sampler
            sigma_max = 200
            sigma_min = 0.01
            rho = 7
            sigmas = np.arange(num_inference_steps + 1) / num_inference_steps
            min_inv_rho = sigma_min ** (1 / rho)
            max_inv_rho = sigma_max ** (1 / rho)
            sigmas = (max_inv_rho + sigmas * (min_inv_rho - max_inv_rho)) ** rho
            sigmas = sigmas / (1 + sigmas)
        else:
            sigmas = np.linspace(self.sigma_max, self.sigma_min, num_inference_steps + 1).copy()[:-1]
            if shift is None:
                shift = self.shift
            sigmas = shift * sigmas / (1 + (shift - 1) * sigmas)
        sigma_last = 0  # final_sigmas_type == "zero"
        timesteps = sigmas * self.num_train_timesteps
        sigmas = np.concatenate([sigmas, [sigma_last]]).astype(np.float32)
        self.sigmas = torch.from_numpy(sigmas)
        self.timesteps = torch.from_numpy(timesteps).to(dtype=torch.int64)
        self.model_outputs = [None] * self.solver_order
        self.lower_order_nums = 0
        self.last_sample = None
        self.step_index = None

    def _lam(self, sigma):
        alpha, sigma = 1 - sigma, sigma  # _sigma_to_alpha_sigma_t
        return alpha, sigma, torch.log(alpha) - torch.log(sigma)

    def _coefs(self, sigma_t, sigma_s0, older, order):
        alpha_t, sigma_t, lambda_t = self._lam(sigma_t)
        _, sigma_s0, lambda_s0 = self._lam(sigma_s0)
        h = lambda_t - lambda_s0
        rks = [(self._lam(self.sigmas[si])[2] - lambda_s0) / h for si in older]
        rks.append(1.0)
        rks = torch.tensor(rks)
        R, b = [], []
        hh = -h  # predict_x0
        h_phi_1 = torch.expm1(hh)
        h_phi_k = h_phi_1 / hh - 1
        factorial_i = 1
        B_h = torch.expm1(hh)  # bh2
        for i in range(1, order + 1):
            R.append(torch.pow(rks, i - 1))
            b.append(h_phi_k * factorial_i / B_h)
            factorial_i *= i + 1
            h_phi_k = h_phi_k / hh - 1 / factorial_i
        return alpha_t, sigma_t, sigma_s0, rks, torch.stack(R), torch.tensor(b), h_phi_1, B_h

    def _uni_p(self, sample, order):
        m0 = self.model_outputs[-1]
        x = sample
        older = [self.step_index - i for i in range(1, order)]
        alpha_t, sigma_t, sigma_s0, rks, R, b, h_phi_1, B_h = self._coefs(
            self.sigmas[self.step_index + 1], self.sigmas[self.step_index], older, order)
        D1s = [(self.model_outputs[-(i + 1)] - m0) / rks[i - 1] for i in range(1, order)]
        if D1s:
            D1s = torch.stack(D1s, dim=1)
            if order == 2:
                rhos_p = torch.tensor([0.5], dtype=x.dtype)
            else:
                rhos_p = torch.linalg.solve(R[:-1, :-1], b[:-1]).to(x.dtype)
        else:
            D1s = None
        x_t_ = sigma_t / sigma_s0 * x - alpha_t * h_phi_1 * m0
        pred_res = torch.einsum("k,bkc...->bc...", rhos_p, D1s) if D1s is not None else 0
        x_t = x_t_ - alpha_t * B_h * pred_res
        return x_t.to(x.dtype)

    def _uni_c(self, this_model_output, last_sample, this_sample, order):
        m0 = self.model_outputs[-1]
        x = last_sample
        older = [self.step_index - (i + 1) for i in range(1, order)]
        alpha_t, sigma_t, sigma_s0, rks, R, b, h_phi_1, B_h = self._coefs(
            self.sigmas[self.step_index], self.sigmas[self.step_index - 1], older, order)
        D1s = [(self.model_outputs[-(i + 1)] - m0) / rks[i - 1] for i in range(1, order)]
        D1s = torch.stack(D1s, dim=1) if D1s else None
        if order == 1:
            rhos_c = torch.tensor([0.5], dtype=x.dtype)
        else:
            rhos_c = torch.linalg.solve(R, b).to(x.dtype)
        x_t_ = sigma_t / sigma_s0 * x - alpha_t * h_phi_1 * m0
        corr_res = torch.einsum("k,bkc...->bc...", rhos_c[:-1], D1s) if D1s is not None else 0
        D1_t = this_model_output - m0
        x_t = x_t_ - alpha_t * B_h * (corr_res + rhos_c[-1] * D1_t)
        return x_t.to(x.dtype)

    def step(self, model_output, timestep, sample):
        if self.step_index is None:  # _init_step_index / index_for_timestep
            indices = (self.timesteps == timestep).nonzero()
            self.step_index = indices[1 if len(indices) > 1 else 0].item()
        use_corrector = self.step_index > 0 and self.last_sample is not None
        x0_pred = sample - self.sigmas[self.step_index] * model_output  # convert_model_output
        if use_corrector:
            sample = self._uni_c(x0_pred, self.last_sample, sample, self.this_order)
        for i in range(self.solver_order - 1):
            self.model_outputs[i] = self.model_outputs[i + 1]
        self.model_outputs[-1] = x0_pred
        this_order = min(self.solver_order, len(self.timesteps) - self.step_index)  # lower_order_final
        self.this_order = min(this_order, self.lower_order_nums + 1)
        self.last_sample = sample
        prev_sample = self._uni_p(sample, self.this_order)
        if self.lower_order_nums < self.solver_order:
            self.lower_order_nums += 1
        self.step_index += 1
        return prev_sample


def repository_grid(steps: int, use_kerras_sigma: bool = True, shift: float = 5.0) -> CosmosRepositoryUniPC:
    ref = CosmosRepositoryUniPC(num_train_timesteps=1000, shift=1)
    ref.set_timesteps(steps, shift=shift, use_kerras_sigma=use_kerras_sigma)  # generate_samples_from_batch
    return ref


def repository_network_timesteps(t: torch.Tensor, cond_frames: torch.Tensor | None = None,
                                 conditional_frame_timestep: float = -1.0) -> torch.Tensor:
    """What the repository's time embedding receives for the int64 timestep ``t`` of the sampling loop.

    ``generate_samples_from_batch``: ``torch.stack([t]).unsqueeze(0)``; ``Video2WorldModelRectifiedFlow.denoise``:
    with ``conditional_frame_timestep >= 0`` the conditioning frames (``cond_frames``: a (T,) 0/1 mask) get that
    value; ``MinimalV1LVGDiT.forward``: ``timesteps_B_T * self.timestep_scale`` (0.001).
    """
    timesteps_B_T = torch.stack([t]).unsqueeze(0)
    if conditional_frame_timestep >= 0:
        mask_B_1_T_1_1 = cond_frames.to(torch.float32).reshape(1, 1, -1, 1, 1)
        timestep_cond_B_1_T_1_1 = torch.ones_like(mask_B_1_T_1_1) * conditional_frame_timestep
        timesteps_B_1_T_1_1 = timestep_cond_B_1_T_1_1 * mask_B_1_T_1_1 + timesteps_B_T * (1 - mask_B_1_T_1_1)
        timesteps_B_T = timesteps_B_1_T_1_1.squeeze()
        timesteps_B_T = timesteps_B_T.unsqueeze(0) if timesteps_B_T.ndim == 1 else timesteps_B_T
    return (timesteps_B_T * 0.001).float()  # Timesteps.forward: .float()


def diffusers_grid(steps: int, **overrides) -> diffusers.UniPCMultistepScheduler:
    ref = diffusers.UniPCMultistepScheduler(**{**COSMOS_UNIPC, **overrides})
    ref.set_timesteps(steps)
    return ref


@pytest.fixture(scope="module")
def folder_config(tmp_path_factory):
    """The scheduler_config.json of a converted Cosmos-Predict2.5 folder, written by diffusers itself."""
    root = tmp_path_factory.mktemp("cosmos-scheduler")
    diffusers.UniPCMultistepScheduler(**COSMOS_UNIPC).save_config(root)
    return json.loads((root / "scheduler_config.json").read_text())


# --------------------------------------------------------------------------- the grids


@pytest.mark.parametrize("steps", [1, 2, 10, 35, 36, 50])
def test_karras_grid_equals_diffusers(folder_config, steps):
    ref = diffusers_grid(steps)
    assert folder_config["_class_name"] == "UniPCMultistepScheduler" and folder_config["use_karras_sigmas"] is True
    for sched in (scheduler_from_config(folder_config),
                  FlowUniPCMultistepScheduler(sigma_grid="karras", sigma_min=0.01, sigma_max=200.0)):
        assert sched.sigma_grid == "karras" and sched.model_timesteps_type == "sigmas"
        state = sched.set_timesteps(steps)
        assert state.sigmas.dtype == np.float32 and state.timesteps.dtype == np.int64
        assert state.num_inference_steps == steps
        np.testing.assert_array_equal(state.sigmas, ref.sigmas.numpy())  # bit for bit
        np.testing.assert_array_equal(state.timesteps, ref.timesteps.numpy())  # int64, truncated
        # pipeline_cosmos2_5_predict.py: the transformer's timestep is scheduler.sigmas[i] (float32)
        assert state.model_timesteps.dtype == np.float32 and state.model_timesteps.shape == (steps,)
        np.testing.assert_array_equal(state.model_timesteps, ref.sigmas[:-1].to(torch.float32).numpy())


def test_karras_grid_sigma_min_final(folder_config):
    ref = diffusers_grid(12, final_sigmas_type="sigma_min")
    state = scheduler_from_config(folder_config, final_sigmas_type="sigma_min").set_timesteps(12)
    np.testing.assert_array_equal(state.sigmas, ref.sigmas.numpy())
    np.testing.assert_array_equal(state.timesteps, ref.timesteps.numpy())
    assert state.sigmas[-1] == state.sigmas[-2] > 0


@pytest.mark.parametrize("steps", [1, 2, 10, 35, 50])
def test_cosmos_grid_equals_repository(folder_config, steps):
    ref = repository_grid(steps)
    for sched in (FlowUniPCMultistepScheduler(sigma_grid="cosmos"), scheduler_from_config(folder_config,
                                                                                           sigma_grid="cosmos")):
        state = sched.set_timesteps(steps)
        assert state.num_inference_steps == steps + 1  # one more than asked: the repository's n + 1 points
        np.testing.assert_array_equal(state.sigmas, ref.sigmas.numpy())
        np.testing.assert_array_equal(state.timesteps, ref.timesteps.numpy())
        assert state.timesteps.dtype == np.int64
        net = np.concatenate([repository_network_timesteps(t).numpy().ravel() for t in ref.timesteps])
        np.testing.assert_array_equal(state.model_timesteps, net)


def test_repository_grid_is_diffusers_grid_one_step_longer():
    # Measured: for every n in 1..120 the repository's grid of n is diffusers' grid of n + 1, bit for bit
    # (hence diffusers' default of 36 steps for the repository's 35).
    for n in range(1, 121):
        ref, dif = repository_grid(n), diffusers_grid(n + 1)
        assert torch.equal(ref.sigmas, dif.sigmas) and torch.equal(ref.timesteps, dif.timesteps), n
    a = FlowUniPCMultistepScheduler(sigma_grid="cosmos").set_timesteps(35)
    b = FlowUniPCMultistepScheduler(sigma_grid="karras", sigma_min=0.01, sigma_max=200.0).set_timesteps(36)
    np.testing.assert_array_equal(a.sigmas, b.sigmas)
    np.testing.assert_array_equal(a.timesteps, b.timesteps)
    # Same grid, different denoiser inputs: truncated timesteps / 1000 lag the sigmas by up to 1e-3.
    gap = np.abs(a.model_timesteps.astype(np.float64) - b.model_timesteps)
    assert 5e-4 < gap.max() < 1e-3


def test_pretrained_checkpoints_use_the_shift_grid():
    # The 2B and 14B pre-trained checkpoints' experiments leave use_kerras_sigma_at_inference False: the
    # repository's linspace grid with the inference shift 5, which is the Wan repository's grid.
    for steps in (10, 35):
        ref = repository_grid(steps, use_kerras_sigma=False, shift=5.0)
        sched = FlowUniPCMultistepScheduler(flow_shift=5.0, sigma_grid="wan", model_timesteps_type="scaled_timesteps")
        state = sched.set_timesteps(steps)
        assert state.num_inference_steps == steps
        np.testing.assert_array_equal(state.sigmas, ref.sigmas.numpy())
        np.testing.assert_array_equal(state.timesteps, ref.timesteps.numpy())
        net = np.concatenate([repository_network_timesteps(t).numpy().ravel() for t in ref.timesteps])
        np.testing.assert_array_equal(state.model_timesteps, net)


# --------------------------------------------------------------------------- the denoiser's timestep


def test_model_timesteps_are_rescaled_into_unit_interval():
    """Paper fault "missing timestep rescaling": the original network sees t * 0.001, in [0, 1], not [0, 1000]."""
    ref = repository_grid(35)
    state = FlowUniPCMultistepScheduler(sigma_grid="cosmos").set_timesteps(35)
    mt = state.model_timesteps
    assert mt.dtype == np.float32 and mt.shape == (36,)
    assert 0.0 < mt.min() and mt.max() <= 1.0
    # 995 * float32(0.001) lands one float32 ulp above float32(0.995); the last step's 9 at 0.009.
    assert mt[0] == np.nextafter(np.float32(0.995), np.float32(1)) and state.timesteps[-1] == 9
    # Each equals what the repository's network embeds, for generated frames and for conditioning frames
    # (the post-trained 2B checkpoint: conditional_frame_timestep=0.1 on the 0..1000 scale).
    cond = torch.tensor([1, 0, 0, 0])
    for i, t in enumerate(ref.timesteps):
        net = repository_network_timesteps(t, cond, conditional_frame_timestep=0.1)[0]
        assert net[1:].eq(net[1]).all() and net[1].item() == mt[i]
        assert net[0].item() == scale_timesteps(0.1) == scale_timesteps(np.float32(0.1))
    assert 0 < scale_timesteps(0.1) < 1.1e-4
    # Exact float32 arithmetic: float32(t) * float32(0.001) is not float32(t / 1000) for 29 of the 36.
    assert int((mt != (state.timesteps / 1000).astype(np.float32)).sum()) == 29
    # The fault itself: a schedule that hands the network the raw timesteps is caught.
    raw = FlowUniPCMultistepScheduler(sigma_grid="cosmos", model_timesteps_type="timesteps").set_timesteps(35)
    assert raw.model_timesteps.max() == 995.0
    assert not np.array_equal(raw.model_timesteps, mt)


def test_scale_timesteps_matches_torch_for_every_training_timestep():
    t = torch.arange(0, 1001)
    for timesteps_B_T in (t.reshape(1, -1), t.reshape(1, -1).to(torch.float32)):  # int64 and float32 paths
        np.testing.assert_array_equal(scale_timesteps(t.numpy()), (timesteps_B_T * 0.001).numpy()[0])
    assert scale_timesteps(t.numpy()).dtype == np.float32
    assert int((scale_timesteps(t.numpy()) != (t.numpy() / 1000).astype(np.float32)).sum()) == 584


def test_state_carries_model_timesteps():
    sched = FlowUniPCMultistepScheduler(sigma_grid="cosmos")
    state = sched.set_timesteps(3)
    x = jnp.ones((1, 4, 1, 2, 2), jnp.float32)
    _, state = sched.step(state, x, x, 0)
    _, state = sched.step(state, x, x, 1)
    assert isinstance(state, SchedulerState)
    np.testing.assert_array_equal(state.model_timesteps, sched.set_timesteps(3).model_timesteps)
    leaves = jax.tree_util.tree_leaves(state)
    assert len(leaves) == 2 + 2 + 1 + 1  # sigmas, timesteps, 2 history arrays, last_sample, model_timesteps
    # The other grids keep no model_timesteps (unchanged states).
    assert FlowUniPCMultistepScheduler(flow_shift=5.0).set_timesteps(3).model_timesteps is None


# --------------------------------------------------------------------------- sampling

SHAPE = (1, 4, 3, 4, 4)
_rs = np.random.RandomState(0)
NOISE = _rs.randn(*SHAPE).astype(np.float32)
X0 = (0.5 * _rs.randn(*SHAPE)).astype(np.float32)


def toy_model(sample: np.ndarray, i: int) -> np.ndarray:
    """A fixed flow prediction per step (deterministic arrays) plus a term in the sample, so errors propagate."""
    jitter = np.random.RandomState(1000 + i).randn(*SHAPE)
    return (NOISE - X0 + 0.2 * np.tanh(sample) + 0.1 * jitter).astype(np.float32)


def _run(sched, steps, ref_step, ref_timesteps):
    """Sample with ours and the reference side by side; return the worst relative error over all steps."""
    state = sched.set_timesteps(steps)
    assert state.num_inference_steps == len(ref_timesteps)
    x_ref, x = torch.from_numpy(NOISE.copy()), jnp.asarray(NOISE)
    worst = 0.0
    for i, t in enumerate(ref_timesteps):
        x_ref = ref_step(torch.from_numpy(toy_model(x_ref.numpy(), i)), t, x_ref)
        x, state = sched.step(state, jnp.asarray(toy_model(np.asarray(x), i)), x, i)
        ref64 = x_ref.numpy().astype(np.float64)
        err = float(np.linalg.norm(np.asarray(x, np.float64) - ref64) / np.linalg.norm(ref64))
        assert err <= 1e-6, f"step {i}: relative error {err}"
        worst = max(worst, err)
    return worst, np.asarray(x)


@pytest.mark.parametrize("steps", [1, 3, 10, 35, 36])
def test_sampling_on_karras_grid_matches_diffusers(folder_config, steps):
    ref = diffusers_grid(steps)
    worst, _ = _run(scheduler_from_config(folder_config), steps,
                    lambda v, t, x: ref.step(v, t, x, return_dict=False)[0], ref.timesteps)
    # bit for bit on an Intel Xeon (float32, op-by-op rounding as torch); 1.4e-7 to 1.7e-7 on an AMD EPYC, where
    # torch's float32 kernels round some steps differently: the schedule's bound, not equality, is CPU-independent
    assert worst <= 1e-6


def test_sampling_on_karras_grid_sigma_min_final(folder_config):
    ref = diffusers_grid(8, final_sigmas_type="sigma_min")
    worst, _ = _run(scheduler_from_config(folder_config, final_sigmas_type="sigma_min"), 8,
                    lambda v, t, x: ref.step(v, t, x, return_dict=False)[0], ref.timesteps)
    assert worst <= 1e-6


@pytest.mark.parametrize("steps", [1, 3, 10, 35])
def test_sampling_on_cosmos_grid_matches_repository(steps):
    ref = repository_grid(steps)
    worst, x = _run(FlowUniPCMultistepScheduler(sigma_grid="cosmos"), steps, ref.step, ref.timesteps)
    assert worst <= 1e-6  # bit for bit on an Intel Xeon, 1.7e-7 on an AMD EPYC (torch's kernels)
    if steps == 35:  # and it is diffusers' 36-step run
        dif = diffusers_grid(36)
        _, y = _run(FlowUniPCMultistepScheduler(sigma_grid="karras", sigma_min=0.01, sigma_max=200.0), 36,
                    lambda v, t, x: dif.step(v, t, x, return_dict=False)[0], dif.timesteps)
        np.testing.assert_array_equal(x, y)


def test_sampling_on_shift_grid_matches_repository():
    ref = repository_grid(35, use_kerras_sigma=False, shift=5.0)
    worst, _ = _run(FlowUniPCMultistepScheduler(flow_shift=5.0, sigma_grid="wan"), 35, ref.step, ref.timesteps)
    assert worst <= 1e-6  # bit for bit on an Intel Xeon, 2.6e-7 on an AMD EPYC (torch's kernels)


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize("change,match", [
    ({"sigma_min": None}, "sigma_min and sigma_max"),
    ({"sigma_max": None}, "sigma_min and sigma_max"),
    ({"sigma_min": "0.01"}, "sigma_min"),
    ({"sigma_min": 0.0}, "sigma_min"),
    ({"sigma_max": float("inf")}, "sigma_max"),
    ({"sigma_min": 300.0}, "sigma_min=300.0 must be below sigma_max"),
    ({"sigma_max": 1e9}, "sigma_max=1000000000.0 is too large"),
    ({"flow_shift": 5.0}, "flow_shift"),
    ({"use_flow_sigmas": False}, "use_flow_sigmas"),
    ({"use_karras_sigmas": 1}, "use_karras_sigmas"),
    ({"use_exponential_sigmas": True}, "use_exponential_sigmas"),
    ({"sigma_grid": "diffusers"}, "sigma_grid"),
    ({"sigma_grid": "wan"}, "sigma_grid"),
    ({"model_timesteps_type": "sigma"}, "model_timesteps_type"),
    ({"prediction_type": "epsilon"}, "prediction_type"),
])
def test_folder_options_refused(folder_config, change, match):
    with pytest.raises(ValueError, match=match):
        scheduler_from_config({**folder_config, **change})


def test_constructor_refusals():
    with pytest.raises(ValueError, match="final_sigmas_type"):
        FlowUniPCMultistepScheduler(sigma_grid="cosmos", final_sigmas_type="sigma_min")
    with pytest.raises(ValueError, match="apply only to sigma_grid"):
        FlowUniPCMultistepScheduler(sigma_min=0.01, sigma_max=200.0)
    with pytest.raises(ValueError, match="apply only to sigma_grid"):
        FlowUniPCMultistepScheduler(sigma_grid="wan", rho=5.0)
    with pytest.raises(ValueError, match="rho"):
        FlowUniPCMultistepScheduler(sigma_grid="cosmos", rho=-1.0)
    with pytest.raises(ValueError, match="sigma_grid='karras' needs"):
        FlowUniPCMultistepScheduler(sigma_grid="karras")
    with pytest.raises(ValueError, match="use_karras_sigmas"):  # a Wan config asked for the Karras grid
        scheduler_from_config({"_class_name": "UniPCMultistepScheduler", "prediction_type": "flow_prediction",
                               "use_flow_sigmas": True, "sigma_grid": "karras"})
    cfg = FlowUniPCMultistepScheduler(sigma_grid="cosmos").config
    assert (cfg["sigma_min"], cfg["sigma_max"], cfg["rho"], cfg["model_timesteps_type"]) == (
        0.01, 200.0, 7.0, "scaled_timesteps")
