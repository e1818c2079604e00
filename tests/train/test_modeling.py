import pytest
import torch
from conftest import budget_for

from gbtrain.train.config import FreezeSettings, LearningRates, LoraSettings, TrainConfig
from gbtrain.train.modeling import (
    LLM,
    MERGER,
    VISION,
    always_run_vision_tower,
    check_options,
    parameter_groups,
    part_of,
    setup_model,
)


def cfg(tiny_model_dir, **kw):
    base = dict(model=str(tiny_model_dir), dataset="d", output_dir="o")
    base.update(kw)
    return TrainConfig(**base)


@pytest.mark.parametrize(("option", "message"), [
    ({"precision": "bf16"}, "precision=bf16 needs a CUDA GPU"),
    ({"attn_implementation": "flash_attention_2"}, "flash_attention_2 needs a CUDA GPU"),
    ({"attn_implementation": "flex_attention"}, "flex_attention trains on a CUDA GPU only"),
    ({"liger": True}, "liger=true needs a CUDA GPU"),
    ({"finetune": "qlora"}, "finetune=qlora needs a CUDA GPU"),
    ({"finetune": "lora", "freeze": FreezeSettings(vision_tower=False)}, "freeze.vision_tower=false needs"),
    ({"finetune": "dora"}, "choose lora, full or qlora"),
])
def test_gpu_only_and_bad_options_fail_clearly(tiny_model_dir, option, message):
    if torch.cuda.is_available():
        pytest.skip("checks the CPU refusals")
    with pytest.raises(ValueError, match=message):
        check_options(cfg(tiny_model_dir, **option))


def test_part_of_names():
    assert part_of("model.visual.blocks.0.mlp.gate_proj.weight") == VISION
    assert part_of("base_model.model.model.visual.merger.mlp.0.weight") == MERGER
    assert part_of("model.language_model.layers.0.mlp.gate_proj.weight") == LLM
    assert part_of("lm_head.weight") == LLM
    assert part_of("model.visual.deepstack_merger_list.0.linear_fc1.weight") == MERGER  # Qwen3-VL
    assert part_of("model.visual.pos_embed.weight") == VISION


def test_full_finetune_freeze_flags_and_groups(family_model_dir):
    c = cfg(family_model_dir, finetune="full", freeze=FreezeSettings(vision_tower=True, merger=False, llm=False),
            lr=LearningRates(llm=1e-4, merger=3e-5, vision_tower=1e-6), weight_decay=0.1)
    model = setup_model(c)
    trains = {part_of(n): p.requires_grad for n, p in model.named_parameters()}
    assert trains == {VISION: False, MERGER: True, LLM: True}
    groups = parameter_groups(model, c)
    assert {(g["part"], g["lr"]) for g in groups} == {(MERGER, 3e-5), (LLM, 1e-4)}
    for g in groups:
        for name, p in zip(g["names"], g["params"], strict=True):
            assert p.requires_grad and part_of(name) == g["part"]
            assert g["weight_decay"] == (0.0 if (p.ndim < 2 or "norm" in name) else 0.1)
    named = {n for g in groups for n in g["names"]}
    assert named == {n for n, p in model.named_parameters() if p.requires_grad}


def test_vision_tower_can_train_with_its_own_rate(tiny_model_dir):
    c = cfg(tiny_model_dir, finetune="full", freeze=FreezeSettings(vision_tower=False, merger=True, llm=True),
            lr=LearningRates(vision_tower=5e-6))
    groups = parameter_groups(setup_model(c), c)
    assert {g["part"] for g in groups} == {VISION} and {g["lr"] for g in groups} == {5e-6}


def test_lora_targets_llm_linears_only(family_model_dir):
    c = cfg(family_model_dir, finetune="lora", lora=LoraSettings(r=4, alpha=8))
    model = setup_model(c)
    lora = [n for n, _ in model.named_parameters() if "lora_" in n]
    assert lora and all(".language_model." in n for n in lora)
    assert {n.split(".lora_")[0].rsplit(".", 1)[-1] for n in lora} == {
        "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    trainable = {part_of(n) for n, p in model.named_parameters() if p.requires_grad}
    assert trainable == {LLM, MERGER}  # adapters + the fully trained merger copy
    mergers = [(n, p) for n, p in model.named_parameters() if part_of(n) == MERGER]
    assert all(p.requires_grad for n, p in mergers if "modules_to_save" in n)  # Qwen3-VL's DeepStack mergers too
    assert {n.split(".modules_to_save.")[0] for n, p in mergers if p.requires_grad} == {
        n.split(".original_module.")[0] for n, p in mergers if ".original_module." in n}
    assert not any(p.requires_grad for n, p in model.named_parameters() if part_of(n) == VISION)


def test_vision_tower_runs_on_text_only_batches(family_model_dir):
    """The ZeRO-3 guard: with no image in the batch the vision tower still takes part (zero gradients)."""
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(family_model_dir).train()
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    model(input_ids=ids, labels=ids).loss.backward()
    assert all(p.grad is None for n, p in model.named_parameters() if ".visual." in n)
    model.zero_grad(set_to_none=True)
    always_run_vision_tower(model)
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    vision_grads = [p.grad for n, p in model.named_parameters() if ".visual.blocks." in n or "merger" in n]
    assert vision_grads and all(g is not None and not g.any() for g in vision_grads)


@pytest.mark.parametrize("finetune", ["lora", "full"])
def test_trainable_parameters_stay_fp32_on_a_bf16_base(tiny_model_dir, finetune):
    """bf16 weights with fp32 master copies: a 1e-5 AdamW step moves every trainable tensor (in pure bf16,
    most such updates round away), and the forward runs under bf16 autocast. (bf16 on CPU: this test only.)"""
    c = cfg(tiny_model_dir, finetune=finetune, precision="bf16", lora=LoraSettings(r=4, alpha=8),
            freeze=FreezeSettings(vision_tower=True, merger=False, llm=False))
    model = setup_model(c).train()
    trainable = {n: p for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all(p.dtype == torch.float32 for p in trainable.values())
    assert any(p.dtype == torch.bfloat16 for p in model.parameters() if not p.requires_grad)
    before = {n: p.detach().clone() for n, p in trainable.items()}
    optimizer = torch.optim.AdamW(trainable.values(), lr=1e-5)
    ids = torch.tensor([[5, 6, 7, 8, 9, 10]])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    moved = [n for n, p in trainable.items() if p.grad is not None and p.grad.any() and not torch.equal(p, before[n])]
    with_grad = [n for n, p in trainable.items() if p.grad is not None and p.grad.any()]
    assert with_grad and moved == with_grad


def test_random_init_uses_the_architecture_only(tiny_model_dir):
    from transformers import AutoModelForImageTextToText

    pretrained = AutoModelForImageTextToText.from_pretrained(tiny_model_dir)
    random_model = setup_model(cfg(tiny_model_dir, finetune="full", model_init="random"))
    a = dict(pretrained.named_parameters())
    b = dict(random_model.named_parameters())
    assert a.keys() == b.keys()
    assert not torch.equal(a["lm_head.weight"], b["lm_head.weight"])


@pytest.mark.parametrize(("option", "key"), [
    ({"lr": LearningRates(llm=-1e-4)}, "lr.llm"), ({"lr": LearningRates(merger=float("nan"))}, "lr.merger"),
    ({"lora": LoraSettings(r=0)}, "lora.r"), ({"lora": LoraSettings(dropout=1.0)}, "lora.dropout"),
    ({"warmup_ratio": 2.0}, "warmup_ratio"), ({"max_steps": 0}, "max_steps"), ({"pack_tokens": 0}, "pack_tokens"),
    ({"gradient_accumulation_steps": 0}, "gradient_accumulation_steps"), ({"max_grad_norm": float("inf")},
                                                                         "max_grad_norm"),
    ({"num_train_epochs": 0.0}, "num_train_epochs"), ({"save_total_limit": 0}, "save_total_limit"),
    ({"limit_train_samples": 0}, "limit_train_samples"), ({"weight_decay": -0.1}, "weight_decay"),
])
def test_out_of_range_training_options_are_named(tiny_model_dir, option, key):
    with pytest.raises(ValueError, match=f"{key}="):
        check_options(cfg(tiny_model_dir, **option))


def test_packed_copies_get_identical_logits_without_extra_keywords(family_model_dir):
    """The cache guard: a model from `load_model`, called as any caller would (no use_cache=False), must
    keep packed samples apart; with transformers 5's text_config.use_cache left True, the second copy
    attends across the pack boundary."""
    from PIL import Image

    from gbtrain.train.collator import GradingCollator, RopeIndex, pop_real_tokens
    from gbtrain.train.modeling import load_model, load_processor

    model = load_model(cfg(family_model_dir)).eval()
    sample = {"messages": [{"role": "user", "content": "Grade the page."},
                           {"role": "assistant", "content": '[{"bbox_2d": [1, 2, 3, 4], "text": "12"}]'}],
              "images": [Image.new("RGB", (300, 200), (180, 180, 180))]}
    packed = GradingCollator(load_processor(family_model_dir, budget_for(family_model_dir)), 4096, packing=True,
                             rope_index=RopeIndex(model.config))([sample, sample])
    pop_real_tokens(packed)
    with torch.no_grad():
        logits = model(**packed).logits[0]
    half = logits.shape[0] // 2
    assert packed["input_ids"].shape[1] == 2 * half
    assert torch.allclose(logits[:half], logits[half:], atol=1e-5)


class VisionGraphRecorder:
    """Records, for every module call inside the vision tower, whether its output requires grad (a global module
    hook: it sees the model the recipe builds itself). The merger's calls are kept apart: it trains."""

    def __init__(self):
        self.tower: set[int] = set()
        self.merger: set[int] = set()
        self.graph_in_tower: list[str] = []
        self.merger_outputs_with_grad = 0

    def _enter(self, module, args):
        if type(module).__name__ in ("Qwen2_5_VisionTransformerPretrainedModel", "Qwen3VLVisionModel"):
            for name, sub in module.named_modules():
                (self.merger if "merger" in name else self.tower).add(id(sub))
            self.tower -= self.merger

    def _leave(self, module, args, output):
        tensors = [output] if torch.is_tensor(output) else [t for t in (getattr(output, "last_hidden_state", None),
                                                                        *(output if isinstance(output, tuple) else ()))
                                                            if torch.is_tensor(t)]
        grad = any(t.requires_grad for t in tensors)
        if id(module) in self.merger:
            self.merger_outputs_with_grad += grad
        elif id(module) in self.tower and grad:
            self.graph_in_tower.append(type(module).__name__)

    def __enter__(self):
        from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

        self.handles = [register_module_forward_pre_hook(self._enter), register_module_forward_hook(self._leave)]
        return self

    def __exit__(self, *exc):
        for handle in self.handles:
            handle.remove()


@pytest.mark.slow
def test_the_recipe_keeps_the_frozen_tower_out_of_autograd(tiny_model_dir, sft_dir, tmp_path):
    """The recipe's own trainer (TRL's SFTTrainer with PEFT and checkpointing, which hooks the input embeddings):
    no activation of the frozen tower requires grad, while the trained merger's do."""
    from gbtrain.train.trainer import train

    run = cfg(tiny_model_dir, dataset=str(sft_dir), output_dir=str(tmp_path / "run"), finetune="lora",
              lora=LoraSettings(r=4, alpha=8), freeze=FreezeSettings(vision_tower=True, merger=False),
              gradient_checkpointing=True, max_steps=2, save_steps=10, eval_steps=10, report_to=[],
              limit_train_samples=8, limit_eval_samples=2, max_length=4096, pack_tokens=4096)
    with VisionGraphRecorder() as recorder:
        summary = train(run)
    assert summary["global_step"] == 2
    assert recorder.tower and not recorder.graph_in_tower
    assert recorder.merger_outputs_with_grad > 0


@pytest.mark.parametrize("reentrant", [False, True])
def test_checkpointing_leaves_the_frozen_tower_out_of_autograd(family_model_dir, reentrant):
    """Both checkpointing modes (ZeRO-3 with PEFT forces the reentrant one) and the hooks PEFT and TRL add."""
    model = setup_model(cfg(family_model_dir, finetune="lora", gradient_checkpointing=True)).train()
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": reentrant})
    model.enable_input_require_grads()
    inputs = vision_batch(family_model_dir)
    with VisionGraphRecorder() as recorder:
        model(**inputs).loss.backward()
    assert recorder.tower and not recorder.graph_in_tower
    assert recorder.merger_outputs_with_grad > 0
    assert all(p.grad is None for n, p in model.named_parameters() if ".visual.blocks." in n)


def test_a_tower_put_back_into_autograd_is_refused(tiny_model_dir):
    """With the requires-grad hook put back on the tower's patch embedding, the first block names the bug."""
    from gbtrain.train.modeling import backbone

    model = setup_model(cfg(tiny_model_dir, finetune="lora", gradient_checkpointing=True)).train()
    backbone(model).visual.patch_embed.register_forward_hook(lambda module, args, output: output.requires_grad_(True))
    with pytest.raises(RuntimeError, match=r"frozen vision tower .* requires grad, so it would be back-propagated"):
        model(**vision_batch(tiny_model_dir))


def vision_batch(model_dir) -> dict:
    from PIL import Image

    from gbtrain.train.collator import GradingCollator
    from gbtrain.train.modeling import load_processor

    sample = {"messages": [{"role": "user", "content": "Grade the page."},
                           {"role": "assistant", "content": '[{"bbox_2d": [1, 2, 3, 4], "text": "A"}]'}],
              "images": [Image.new("RGB", (120, 90), "white")]}
    return GradingCollator(load_processor(model_dir, budget_for(model_dir)), 4096)([sample])
