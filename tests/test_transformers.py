"""PrecisionTimeTrainerCallback in real HF Trainer runs on a tiny config (CPU, no downloads)."""

from __future__ import annotations

import os
import re
import warnings
import sys

import pytest
import torch

transformers = pytest.importorskip("transformers")
from transformers import TrainerCallback, TrainerState, TrainingArguments  # noqa: E402
from transformers.trainer_callback import ProgressCallback  # noqa: E402

from ptp_callback.integrations.transformers import (PrecisionTimeTrainerCallback, precision_of,  # noqa: E402
                                                    read_schedule)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))

ETA = re.compile(r"^\d{2}:\d{2} 32-true$")


class Seen(TrainerCallback):
    """Counts what the Trainer did and keeps the logs as the callbacks after ours see them."""

    def __init__(self) -> None:
        self.evaluations = self.saves = 0
        self.logs: list[dict] = []

    def on_evaluate(self, args, state, control, **kwargs):
        self.evaluations += 1

    def on_save(self, args, state, control, **kwargs):
        self.saves += 1

    def on_log(self, args, state, control, logs=None, **kwargs):
        self.logs.append(dict(logs))


def test_a_trainer_run_shows_the_eta_in_its_bar_and_logs_and_follows_its_schedule(tmp_path, capfd):
    import hf_trainer

    seen = Seen()
    # 128 samples / 16 = 8 micro-batches an epoch, accumulate 2: 4 steps an epoch, 2 epochs = 8 steps
    trainer, callback = hf_trainer.main(str(tmp_path / "out"), samples=128, device="h100-sxm", advise=False,
                                        callbacks=[seen], eval_steps=3, save_steps=4, logging_steps=2)
    schedule = callback.tracker.forecaster.schedule
    assert (schedule.total_batches, schedule.total_steps) == (16, 8)
    # eval_steps=3: after steps 3 and 6 (positions 6 and 8 + 4) and after the last step (16); save_steps=4: 8, 16
    assert schedule.val_after_batches == (6, 12, 16) and callback.tracker.forecaster.saves == (8, 16)
    assert (seen.evaluations, seen.saves) == (3, 2)
    parts = callback.tracker.forecaster.parts(callback.clock())
    assert (parts["train"].count, parts["val"].count, parts["save"].count, parts["epoch"].count) == (16, 3, 2, 2)
    training_logs = [log for log in seen.logs if "loss" in log]
    assert training_logs and all(ETA.match(log["eta"]) for log in training_logs)
    assert isinstance(callback._bar_owner, ProgressCallback)  # the Trainer's own bar
    assert callback.tracker.advice_as_warning  # PrecisionAdvice (test_tracker.py::test_advice_as_a_warning)
    err = capfd.readouterr().err
    assert re.search(r"eta=\d{2}:\d{2} 32-true\]", err)
    assert "ptp: predicted run " in err and "on NVIDIA H100 SXM5 80GB" in err and "(16 batches)" in err
    assert "ptp: run took" in err
    assert "run took" in callback.tracker.summary  # the H100's prediction stated, not an error against the CPU's run
    assert "here; predicted before step one for NVIDIA H100 SXM5 80GB:" in callback.tracker.summary
    # The report leaves out a part under 50 ms both measured and predicted (a fast disk's saves)
    save, planned = parts["save"], callback.tracker.forecaster.initial_parts["save"]
    assert ("checkpoints" in callback.tracker.summary) == (max(save.spent_s, planned.spent_s + planned.left_s) >= 0.05)
    # Evaluations predicted before step one from the Trainer's own evaluation loader (64 samples,
    # 32 a batch): two batches each, one of them traced without gradients.
    assert schedule.val_batches_per_run == 2
    prediction = callback.tracker.prediction
    assert prediction.val_step is not None and 0 < prediction.val_step.step_s < prediction.step.step_s
    assert prediction.plan.val_batch_s > 0 and "validation" in callback.tracker.plan_text
    assert "(not predicted)" not in callback.tracker.summary


def test_a_trainers_own_compute_loss_is_the_step_traced(tmp_path):
    import hf_trainer
    import torch.nn.functional as F
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer

    from ptp_callback.notices import PtpWarning

    class Targets(hf_trainer.RandomTokens):  # a key the loss needs and the model does not take
        def __getitem__(self, i):
            return {"input_ids": self.ids[i], "target": self.ids[i]}

    class TwoPasses(Trainer):  # R-Drop style: two forward passes and a loss of its own
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            target = inputs.pop("target")
            first, second = model(**inputs), model(**inputs)
            gap = (first.logits - second.logits).pow(2).mean()
            self.log({"gap": gap.item()})  # the trace's stand-in value must not reach the run's logs
            loss = F.cross_entropy(first.logits.flatten(0, 1), target.flatten()) + gap
            return (loss, first) if return_outputs else loss

    config = GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=128, n_positions=16)
    callback = PrecisionTimeTrainerCallback(advise=False)
    trainer = TwoPasses(model=GPT2LMHeadModel(config), args=arguments(tmp_path, max_steps=2, remove_unused_columns=False,
                                                                       per_device_train_batch_size=4),
                        train_dataset=Targets(8, 16, 128, seed=0), callbacks=[callback])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.train()
    assert not [w for w in caught if issubclass(w.category, PtpWarning)]  # model(**batch) alone fails on "target"
    ops = callback.tracker.prediction.trace.ops
    assert sum(op.name == "aten.embedding.default" and op.phase == "forward" for op in ops) == 4  # wte, wpe twice
    assert sum("gap" in row for row in trainer.state.log_history) == 2  # the two real steps'


def test_a_peft_models_saves_are_priced_as_its_adapters_and_their_optimizer_state(tmp_path):
    import glob

    import hf_trainer
    from peft import LoraConfig, get_peft_model
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer

    config = GPT2Config(n_layer=2, n_embd=128, n_head=2, vocab_size=1024, n_positions=16)
    model = get_peft_model(GPT2LMHeadModel(config), LoraConfig(r=4, target_modules=["c_attn"], task_type="CAUSAL_LM"))
    callback = PrecisionTimeTrainerCallback(advise=False)
    Trainer(model=model, args=arguments(tmp_path, max_steps=2, save_strategy="steps", save_steps=2,
                                        per_device_train_batch_size=4),
            train_dataset=hf_trainer.RandomTokens(8, 16, 1024, seed=0), callbacks=[callback]).train()
    written = sum(os.path.getsize(path) for name in ("adapter_model.safetensors", "optimizer.pt")
                  for path in glob.glob(str(tmp_path / "checkpoint-*" / name)))
    # the frozen base (2 MB here) is not saved: the adapters (16 KB) and their AdamW state are
    assert callback.tracker.prediction.checkpoint_bytes == pytest.approx(written, rel=0.1)


def test_generation_in_evaluations_and_compilation_are_named_in_the_plan(tmp_path):
    from transformers import Seq2SeqTrainer, Seq2SeqTrainingArguments, T5Config, T5ForConditionalGeneration

    class Pairs(torch.utils.data.Dataset):
        def __len__(self):
            return 8

        def __getitem__(self, i):
            return {"input_ids": torch.randint(2, 64, (8,)), "labels": torch.randint(2, 64, (4,))}

    model = T5ForConditionalGeneration(T5Config(vocab_size=64, d_model=32, d_ff=64, d_kv=8, num_layers=1,
                                                num_heads=2, decoder_start_token_id=0))
    callback = PrecisionTimeTrainerCallback(advise=False)
    args = Seq2SeqTrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to="none", max_steps=2,
                                    per_device_train_batch_size=4, eval_strategy="steps", eval_steps=2,
                                    predict_with_generate=True, generation_max_length=4, torch_compile=True,
                                    torch_compile_backend="eager", save_strategy="no")
    Seq2SeqTrainer(model=model, args=args, train_dataset=Pairs(), eval_dataset=Pairs(), callbacks=[callback],
                   compute_metrics=lambda prediction: {}).train()
    assert "; torch.compile's compilation is not in it" in callback.tracker.plan_text
    assert "; evaluations predicted as forward passes, without generate()" in callback.tracker.plan_text


def test_several_evaluation_datasets_are_priced_from_the_one_with_the_most_batches(tmp_path):
    import hf_trainer
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer

    # 1 batch of 16 tokens, then 4 of 32: the evaluation is mostly the second's
    evaluations = {"short": hf_trainer.RandomTokens(8, 16, 128, seed=1),
                   "long": hf_trainer.RandomTokens(128, 32, 128, seed=2)}
    callback = PrecisionTimeTrainerCallback(advise=False)
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=128, n_positions=32))
    Trainer(model=model, args=arguments(tmp_path, max_steps=2, eval_strategy="steps", eval_steps=2,
                                        per_device_train_batch_size=8, per_device_eval_batch_size=32),
            train_dataset=hf_trainer.RandomTokens(16, 32, 128, seed=0), eval_dataset=evaluations,
            callbacks=[callback]).train()
    assert callback.tracker.forecaster.schedule.val_batches_per_run == 1 + 4
    assert callback.tracker.inputs.val_batch["input_ids"].shape == (32, 32)


def test_early_stopping_is_named_in_the_plan_and_its_stop_reported(tmp_path):
    import hf_trainer
    from transformers import EarlyStoppingCallback

    # No eval_loss improves on the first by 1e9: the run stops at the second evaluation (step 4 of 8).
    stop = EarlyStoppingCallback(early_stopping_patience=1, early_stopping_threshold=1e9)
    _, callback = hf_trainer.main(str(tmp_path / "out"), samples=128, advise=False, callbacks=[stop], eval_steps=2,
                                  save_steps=2, load_best_model_at_end=True, metric_for_best_model="eval_loss")
    assert callback.tracker.plan_text.endswith("; EarlyStoppingCallback may end it sooner")
    assert callback.tracker.forecaster.stopped_early == (8, 16)
    assert callback.tracker.summary.startswith("run stopped early after 8 of 16 training batches")


def test_resume_restores_the_calibration_and_starts_where_the_checkpoint_left(tmp_path, capfd):
    import hf_trainer

    out = str(tmp_path / "out")
    _, first = hf_trainer.main(out, samples=128, epochs=2, device="h100-sxm", advise=False, eval_strategy="no",
                               save_steps=4, max_steps=4, restore_callback_states_from_checkpoint=True)
    measured = first.tracker.forecaster.state_dict(first.clock())["units"]["train"]
    capfd.readouterr()
    seen = Seen()
    _, second = hf_trainer.main(out, samples=128, epochs=2, device="h100-sxm", advise=False, eval_strategy="no",
                                save_steps=4, max_steps=8, restore_callback_states_from_checkpoint=True,
                                resume=os.path.join(out, "checkpoint-4"), callbacks=[seen])
    # The restored copy is appended after the Trainer's bar, which prints each log line: it is moved
    # back before it, so the printed lines (and the callbacks after it) carry the ETA again.
    training_logs = [log for log in seen.logs if "loss" in log]
    assert training_logs and all(ETA.match(log["eta"]) for log in training_logs)
    captured = capfd.readouterr()
    printed = [line for line in (captured.out + captured.err).splitlines() if "'loss'" in line]
    assert printed and all("'eta': '" in line for line in printed)
    assert second is not first
    schedule = second.tracker.forecaster.schedule
    # 128 / 16 = 8 micro-batches an epoch, 4 steps: step 4 ends epoch 0, so the resume starts at epoch 1
    assert (schedule.start_batch, schedule.start_step, schedule.start_epoch) == (8, 4, 1)
    assert second.tracker.forecaster._prior["train"] == pytest.approx(measured, rel=0.2)
    assert second.tracker.forecaster.parts(second.clock())["train"].count == 8


def arguments(tmp_path, **settings):
    return TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to="none", **settings)


def test_precision_from_the_arguments_and_the_model(tmp_path):
    model = torch.nn.Linear(4, 4)
    assert precision_of(arguments(tmp_path), model).label == "32-true"
    assert precision_of(arguments(tmp_path, bf16=True), model).label == "bf16-mixed"
    assert precision_of(arguments(tmp_path), model.to(torch.bfloat16)).label == "bf16-true"
    # A bf16 base with fp32 adapters (PEFT's LoRA default): bf16=True autocasts, the adapters stay fp32
    adapted = torch.nn.Sequential(torch.nn.Linear(4, 4).to(torch.bfloat16), torch.nn.Linear(4, 4))
    assert precision_of(arguments(tmp_path, bf16=True), adapted).label == "bf16-mixed"
    assert precision_of(arguments(tmp_path), adapted).label == "32-true"  # each weight in its own dtype
    # Accelerate runs fp16 on a CPU without autocast or GradScaler
    assert precision_of(arguments(tmp_path, fp16=True), torch.nn.Linear(4, 4)).label == "32-true"


@pytest.mark.parametrize("settings, evaluations, saves", [
    (dict(eval_strategy="epoch", save_strategy="epoch"), (10, 20, 30), (10, 20, 30)),
    (dict(eval_strategy="steps", eval_steps=4, save_strategy="steps", save_steps=5),
     (8, 16, 24, 30), (10, 20, 30)),
    (dict(eval_strategy="steps", eval_steps=4, eval_delay=6, save_strategy="best"), (16, 24, 30), (16, 24, 30)),
    (dict(eval_strategy="no", save_strategy="no"), (), ()),
    (dict(eval_strategy="epoch", save_strategy="best", eval_on_start=True), (0, 10, 20, 30), (10, 20, 30)),
    # DefaultFlowCallback.on_epoch_end evaluates where eval_delay <= state.epoch: from epoch 1's end on
    (dict(eval_strategy="epoch", eval_delay=1, save_strategy="no"), (10, 20, 30), ()),
], ids=["epoch", "steps", "delay-best", "none", "on-start", "epoch-delay"])
def test_evaluations_and_saves_follow_the_default_flow_rules(tmp_path, settings, evaluations, saves):
    # 10 micro-batches an epoch, accumulate 2: 5 steps an epoch; 3 epochs = 15 steps
    args = arguments(tmp_path, gradient_accumulation_steps=2, **settings)
    state = TrainerState()
    state.compute_steps(args, 15)
    state.max_steps = 15
    schedule, save_positions = read_schedule(args, state, 10)
    assert (schedule.total_batches, schedule.total_steps) == (30, 15)
    assert schedule.val_after_batches == evaluations and save_positions == saves


@pytest.mark.parametrize("delay, evaluations", [(2.4, (24,)), (2.5, ())])
def test_an_epoch_delay_compares_with_the_epoch_fraction_where_a_run_stops_mid_epoch(tmp_path, delay, evaluations):
    # 5 steps an epoch, max_steps=12: the run stops 2 steps into its third epoch, where state.epoch
    # is 2.4 when on_epoch_end evaluates (as a real run with num_train_epochs=2.5 showed)
    args = arguments(tmp_path, gradient_accumulation_steps=2, eval_strategy="epoch", eval_delay=delay,
                     save_strategy="no")
    state = TrainerState()
    state.compute_steps(args, 12)
    state.max_steps = 12
    schedule, _ = read_schedule(args, state, 10)
    assert schedule.total_batches == 24 and schedule.val_after_batches == evaluations


def test_a_resumed_state_starts_mid_epoch(tmp_path):
    args = arguments(tmp_path, gradient_accumulation_steps=2)
    state = TrainerState()
    state.compute_steps(args, 15)
    state.max_steps, state.global_step = 15, 7  # epoch 1 (5 steps an epoch), 2 steps into it
    schedule, _ = read_schedule(args, state, 10)
    assert (schedule.start_batch, schedule.start_epoch, schedule.start_batch_in_epoch) == (14, 1, 4)
    assert schedule.remaining(14).optimizer_steps == 8


def test_an_unknown_device_fails_when_the_callback_is_built():
    with pytest.raises(ValueError, match=r"'h10' is not a known GPU; did you mean h100"):
        PrecisionTimeTrainerCallback(device="h10")
    with pytest.raises(ValueError, match=r"advise='always'"):
        PrecisionTimeTrainerCallback(advise="always")
    with pytest.raises(ValueError, match=r"TrainerCallback\(warmup_batches=-1\): expected an integer >= 0"):
        PrecisionTimeTrainerCallback(warmup_batches=-1)
    with pytest.raises(ValueError, match=r"PrecisionTimeTrainerCallback\(refresh_s='1'\): expected a number"):
        PrecisionTimeTrainerCallback(refresh_s="1")


def test_gradient_checkpointing_is_traced_with_the_forward_run_again_in_the_backward(tmp_path):
    import hf_trainer

    def step(**settings):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            _trainer, callback = hf_trainer.main(str(tmp_path / str(len(settings))), samples=64, epochs=1,
                                                 device="h100-sxm", advise=False, **settings)
        assert not [w for w in caught if "ptp" in str(w.message)]  # traced: no fallback to measured timing
        return callback.tracker.prediction

    plain, checkpointed = step(), step(gradient_checkpointing=True)
    gemms = {name: sum(op.cost.op_class == "gemm" and op.phase == "backward" for op in p.trace.ops)
             for name, p in (("plain", plain), ("checkpointed", checkpointed))}
    assert gemms["checkpointed"] > gemms["plain"]  # the blocks' linears run again before their backward
    assert checkpointed.step.step_s > plain.step.step_s


def test_a_cpu_run_is_planned_with_the_trainers_own_loop_work(tmp_path):
    import hf_trainer
    from ptp_callback.host_costs import HF_TRAINER_LOOP
    from ptp_callback.probe import probed_small_op_s

    _trainer, callback = hf_trainer.main(str(tmp_path / "out"), samples=64, epochs=1, advise=False,
                                         eval_strategy="no", save_strategy="no", use_cpu=True)
    prediction = callback.tracker.prediction
    small_op_s = probed_small_op_s(prediction.coefficients)
    # its micro-batches, its optimizer steps (scheduler, callbacks) and its evaluation batches
    assert (prediction.host.loop_s, prediction.host.step_loop_s, prediction.host.val_loop_s) == pytest.approx(
        (HF_TRAINER_LOOP.batch_ops * small_op_s, HF_TRAINER_LOOP.step_ops * small_op_s,
         HF_TRAINER_LOOP.val_batch_ops * small_op_s))
    optimizer_s = prediction.step.breakdown["phase"]["optimizer"]
    assert prediction.plan.optimizer_step_s == pytest.approx(optimizer_s + prediction.host.step_loop_s)


def test_blocks_a_callback_unfreezes_at_an_epoch_get_the_steps_priced_again_from_there(tmp_path):
    import hf_trainer
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer

    class UnfreezeAtEpochOne(TrainerCallback):  # a user's callback, after ours in the list
        def on_epoch_begin(self, args, state, control, model=None, optimizer=None, lr_scheduler=None, **kwargs):
            if state.epoch == 1.0:
                blocks = model.transformer.h
                blocks.requires_grad_(True)
                optimizer.add_param_group({"params": list(blocks.parameters()), "lr": 1e-5, "weight_decay": 0.0})
                lr_scheduler.base_lrs.append(1e-5)  # the schedule goes on for the new group too
                lr_scheduler.lr_lambdas.append(lr_scheduler.lr_lambdas[0])

    class Factors(TrainerCallback):
        def __init__(self):
            self.seen = []

        def on_step_end(self, args, state, control, **kwargs):
            self.seen.append(callback.tracker._watch.factor)

    model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=128, n_positions=16))
    model.transformer.h.requires_grad_(False)  # the Trainer's optimizer holds the embeddings and norms only
    callback, factors = PrecisionTimeTrainerCallback(advise=False), Factors()
    args = arguments(tmp_path, num_train_epochs=2, per_device_train_batch_size=4, save_strategy="no")
    Trainer(model=model, args=args, train_dataset=hf_trainer.RandomTokens(16, 16, 128, seed=0),
            callbacks=[callback, UnfreezeAtEpochOne(), factors]).train()
    assert len(factors.seen) == 8 and set(factors.seen[:4]) == {1.0}
    assert factors.seen[4] > 1.05 and set(factors.seen[4:]) == {factors.seen[4]}  # traced again once, at epoch 1
