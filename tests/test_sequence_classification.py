"""Sequence classification in every family; the encoder-decoder pools at the last EOS, as BART does."""

import inspect

import pytest
import torch
from transformers import AutoModelForSequenceClassification

import hf_vanilla as hv
from hf_vanilla.modeling_vanilla import shift_tokens_right
from hf_vanilla.variants import head_families
from tests.factories import FAMILIES, VOCAB, tiny_config

PAD, EOS = 0, 2


def classifier(family: str, seed: int = 0, **overrides) -> hv.VanillaForSequenceClassification:
    torch.manual_seed(seed)
    return hv.VanillaForSequenceClassification(tiny_config(family, "sinusoidal", num_labels=3, **overrides)).eval()


def eos_terminated(lengths: tuple[int, ...] = (9, 7, 4), seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of random tokens in [3, VOCAB), each ending with EOS, right-padded to the longest."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.full((len(lengths), max(lengths)), PAD)
    mask = torch.zeros_like(ids)
    for row, length in enumerate(lengths):
        ids[row, : length - 1] = torch.randint(3, VOCAB, (length - 1,), generator=generator)
        ids[row, length - 1] = EOS
        mask[row, :length] = 1
    return ids, mask


def test_every_family_may_carry_a_sequence_classifier():
    assert set(head_families("VanillaForSequenceClassification")) == set(FAMILIES)
    config = tiny_config("encoder-decoder", architectures=["VanillaForSequenceClassification"])
    assert config.classifier_pooling == "eos"


@pytest.mark.parametrize("family", FAMILIES)
def test_trains_saves_and_reloads_through_the_auto_class(family, tmp_path):
    model = classifier(family).train()
    ids, mask = eos_terminated()
    labels = torch.tensor([0, 1, 2])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(5):
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < losses[0], losses

    model.eval().save_pretrained(tmp_path)
    reloaded = AutoModelForSequenceClassification.from_pretrained(tmp_path).eval()
    assert type(reloaded) is hv.VanillaForSequenceClassification
    with torch.no_grad():
        torch.testing.assert_close(reloaded(input_ids=ids, attention_mask=mask).logits,
                                   model(input_ids=ids, attention_mask=mask).logits, rtol=0, atol=0)


@pytest.mark.parametrize("family", FAMILIES)
def test_right_padding_gives_the_logits_of_each_row_alone(family):
    model = classifier(family)
    ids, mask = eos_terminated()
    with torch.no_grad():
        batched = model(input_ids=ids, attention_mask=mask).logits
        alone = torch.cat([model(input_ids=row[m.bool()][None]).logits for row, m in zip(ids, mask, strict=True)])
    torch.testing.assert_close(batched, alone)


def test_encoder_decoder_reads_the_decoder_state_at_the_last_eos():
    model = classifier("encoder-decoder")
    ids, mask = eos_terminated((6, 6, 6))
    ids[:, 2] = EOS  # a second EOS per row: the last one is pooled
    config = model.config
    with torch.no_grad():
        decoder_input_ids = shift_tokens_right(ids, config.pad_token_id, config.decoder_start_token_id)
        states = model.model(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_input_ids).last_hidden_state
        out = model(input_ids=ids, attention_mask=mask)
    torch.testing.assert_close(out.logits, model.score(states[:, 5]), rtol=0, atol=0)
    assert out.encoder_last_hidden_state.shape == (3, 6, config.hidden_size)


@pytest.mark.parametrize(
    "second_row, counts",
    [([5, 6, 7, 8, 9, 10], r"\[1, 0\]"), ([5, EOS, 7, 8, 9, EOS], r"\[1, 2\]")],
)
def test_rows_without_the_same_number_of_eos_tokens_are_refused(second_row, counts):
    ids = torch.tensor([[5, 6, 7, 8, 9, EOS], second_row])
    with pytest.raises(ValueError, match=rf"same number of EOS tokens.*{counts}"):
        classifier("encoder-decoder")(input_ids=ids)


def test_encoder_decoder_needs_input_ids_to_find_eos():
    model = classifier("encoder-decoder")
    with pytest.raises(ValueError, match="input_ids"):
        model(inputs_embeds=torch.randn(2, 5, 32))


# Why the heads are not transformers' GenericFor* heads: two things those would change, pinned here.


@pytest.mark.parametrize("head", [hv.VanillaForSequenceClassification, hv.VanillaForTokenClassification,
                                  hv.VanillaForQuestionAnswering, hv.VanillaForMaskedLM])
def test_every_head_that_reads_segments_names_token_type_ids(head):
    """Trainer drops the dataset columns forward() does not name (remove_unused_columns): segment ids must stay."""
    assert "token_type_ids" in inspect.signature(head.forward).parameters


def test_the_token_loss_takes_trainers_item_count():
    """Under gradient accumulation Trainer passes num_items_in_batch: the loss is summed over that many tokens."""
    torch.manual_seed(0)
    model = hv.VanillaForTokenClassification(tiny_config("encoder", "sinusoidal", num_labels=3)).eval()
    ids = torch.randint(3, VOCAB, (2, 6))
    labels = torch.randint(0, 3, (2, 6))
    mean = model(input_ids=ids, labels=labels).loss
    summed_over_twice_as_many = model(input_ids=ids, labels=labels, num_items_in_batch=torch.tensor(24)).loss
    torch.testing.assert_close(summed_over_twice_as_many, mean / 2)
