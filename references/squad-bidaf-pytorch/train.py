"""squad-bidaf-pytorch: BiDAF (Seo et al., ICLR 2017, arXiv:1611.01603) on SQuAD v1.1 in PyTorch.

Read top to bottom; fork the directory and edit this file to make an entry of your own. The
squad-bidaf-tensorflow reference builds the same network from the same spec (both
READMEs): the same hyperparameter names, the same layers, so the two parameter counts differ only
by PyTorch's second LSTM bias (8 directions x 4 x hidden = 3,200 at hidden 100).

The anchor is the DAWNBench seed's code, stanford-futuredata/dawn-bench-models
tensorflow/SQuAD/basic (a copy of allenai/bi-att-flow): where it and the paper differ, this file
follows the code (README: the recipe-vs-anchor table).

The network, bottom to top (h = hidden = 100, d0 = char_filters + word_dim = 200):
  1. characters: a trainable 8-d embedding, dropout, a width-5 convolution to 100 filters, ReLU,
     max over the word's characters: 100 numbers per word;
  2. words: frozen 100-d GloVe (glove.6B.100d), looked up per role for its own words (not a
     learned weight: never saved, never counted), and a trained table for the unknown word and
     the frequent training words GloVe lacks (common.squad.learned_words; saved with the model);
  3. [chars; words] through 2 highway layers (d0 -> d0), shared by context and question;
  4. one bidirectional LSTM (d0 -> h per direction), shared: H (context), U (question);
  5. attention flow: S[t, j] = w^T [h_t; u_j; h_t * u_j] (no bias); context-to-query
     U~ = softmax_j(S) U; query-to-context h~ = softmax_t(max_j S) H, tiled;
     G = [H; U~; H * U~; H * h~] (8h);
  6. modeling: two bidirectional LSTMs (8h -> h, 2h -> h): M;
  7. output: start logits w1^T [G; M]; a = softmax(start logits) M, tiled over the context;
     M2 = a bidirectional LSTM over [G; M; a; M * a] (14h -> h); end logits w2^T [G; M2].
Dropout (rate `dropout`) where the seed has it: the character embedding, the question's contextual
LSTM input (not the context's), both modeling layers' inputs, the end LSTM's input (each LSTM's
input with one mask per direction, as the seed's dropout wrapper on each cell) and the inputs of
the start and end logits. Loss: cross-entropy of the start plus that of the end, mean over the
batch. Adam (lr 0.001), an exponential moving average (0.999) of every weight, updated after every
step: the average is what is saved and what predicts. The LSTMs run on packed sequences
(pack_padded_sequence), so on a GPU they are cuDNN's and padding costs nothing.

Data: common.squad (spaCy-blank tokens with character offsets, GloVe reading, padded batches, the
span decoder). The harness times and scores everything; the predictor sees the dev questions
without their answers.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from common import squad
from common.torch_base import CONFIG_FILE, MODEL_FILE, TorchReference

CHARS_FILE = "chars.json"                   # the trainer's character list, saved with the weights
WORDS_FILE = "words.json"                   # the learned words, in the order of their trained rows
TRAIN_FILE = "train-v1.1.json"              # in the trainer's view: data_root/squad/
QUESTIONS_FILE = "dev-v1.1.questions.json"  # in the predictor's view: the dev file without answers
NEG = -1e30                                 # a masked logit: exp() of it is 0, and no inf - inf NaNs


# ----------------------------------------------------------------------------------------------
# The network

class Highway(nn.Module):
    """out = g * relu(W_t x + b_t) + (1 - g) * x, g = sigmoid(W_g x + b_g)."""

    def __init__(self, dim: int):
        super().__init__()
        self.transform, self.gate = nn.Linear(dim, dim), nn.Linear(dim, dim)

    def forward(self, x):
        g = torch.sigmoid(self.gate(x))
        return g * F.relu(self.transform(x)) + (1 - g) * x


class BiLSTM(nn.Module):
    """A bidirectional LSTM over right-padded sequences: a forward and a backward LSTM (`fw`, `bw`),
    their outputs concatenated (2h). With `drop`, each direction drops its own mask on the input, as
    the seed's one SwitchableDropoutWrapper per cell (basic/model.py:154-169, a DropoutWrapper's
    input_keep_prob on each of cell_fw and cell_bw); nn.LSTM's bidirectional module reads one input
    for both. Packed, so that the backward LSTM starts at each sequence's last real token (each
    sequence reversed within its length, as tf.reverse_sequence in the seed's
    bidirectional_dynamic_rnn) and, on a GPU, cuDNN skips the padding."""

    def __init__(self, d_in: int, hidden: int, dropout: float = 0.0):
        super().__init__()
        self.fw = nn.LSTM(d_in, hidden, batch_first=True)
        self.bw = nn.LSTM(d_in, hidden, batch_first=True)
        self.dropout = dropout

    def run(self, lstm, x, lengths):
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        return pad_packed_sequence(lstm(packed)[0], batch_first=True, total_length=x.shape[1])[0]

    def forward(self, x, lengths, drop: bool = False):
        fw_in, bw_in = x, x
        if drop:
            fw_in, bw_in = (F.dropout(x, self.dropout, self.training) for _ in range(2))
        # Position t of row b reversed within the row's length (padding stays where it is): the index
        # is its own inverse, so it also puts the backward outputs back in order.
        t = torch.arange(x.shape[1])
        rev = torch.where(t[None] < lengths[:, None], lengths[:, None] - 1 - t[None], t[None]).to(x.device)
        rev = rev.unsqueeze(2)
        fw = self.run(self.fw, fw_in, lengths)
        bw = self.run(self.bw, bw_in.gather(1, rev.expand_as(bw_in)), lengths)
        return torch.cat([fw, bw.gather(1, rev.expand_as(bw))], dim=2)


class BiDAF(nn.Module):
    """word_vectors: the frozen GloVe rows (read_glove's table: rows 0 and 1 unused); n_learned: the
    learned words (common.squad.Encoder's ids 2 .. n_learned + 1), each with a trained row."""

    def __init__(self, word_vectors: torch.Tensor, n_chars: int, cfg: dict, n_learned: int = 0):
        super().__init__()
        h, d0 = cfg["hidden"], cfg["char_filters"] + cfg["word_dim"]
        self.dropout = cfg["dropout"]
        # Frozen GloVe: a buffer, not a parameter, and not in the state dict (each role builds its own).
        self.register_buffer("word_vectors", word_vectors, persistent=False)
        # Padding, the unknown word and the learned words, trained, drawn from N(0, 1) as the seed's
        # (basic/main.py:76-78); the padding row stays zero (padded words are masked and packed).
        self.word_emb = nn.Embedding(n_learned + 2, cfg["word_dim"], padding_idx=squad.PAD)
        # Every character row trained, the padding character's too, as the seed's char_emb_mat
        # (basic/model.py:102, :105-106): a word shorter than max_word_chars is padded to it, and the padding
        # character's embedding enters the convolution and its max for that word.
        self.char_emb = nn.Embedding(n_chars, cfg["char_dim"])
        self.char_conv = nn.Conv1d(cfg["char_dim"], cfg["char_filters"], cfg["char_width"])
        self.highway = nn.Sequential(*[Highway(d0) for _ in range(cfg["highway_layers"])])
        self.context = BiLSTM(d0, h, cfg["dropout"])
        self.similarity = nn.Linear(6 * h, 1, bias=False)
        self.modeling1 = BiLSTM(8 * h, h, cfg["dropout"])
        self.modeling2 = BiLSTM(2 * h, h, cfg["dropout"])
        self.start = nn.Linear(10 * h, 1, bias=False)
        self.end_lstm = BiLSTM(14 * h, h, cfg["dropout"])   # [G; M; a; M * a]
        self.end = nn.Linear(10 * h, 1, bias=False)

    def set_words(self, word_vectors: torch.Tensor) -> None:
        """Swap the frozen word table (the predictor's dev words for the trainer's train words)."""
        self.word_vectors = word_vectors.to(self.char_emb.weight.device)

    def words(self, ids):
        """(B, L) word ids -> (B, L, word_dim): trained rows below n_learned + 2, GloVe above."""
        n = self.word_emb.num_embeddings
        trained = self.word_emb(ids.clamp(max=n - 1))
        frozen = F.embedding((ids - (n - 2)).clamp(min=0), self.word_vectors)
        return torch.where((ids < n).unsqueeze(2), trained, frozen)

    def embed(self, words, chars):
        """(B, L) word ids and (B, L, W) character ids -> (B, L, d0) highway outputs."""
        b, length, width = chars.shape
        c = F.dropout(self.char_emb(chars.view(b * length, width)), self.dropout, self.training)
        c = F.relu(self.char_conv(c.transpose(1, 2))).amax(dim=2).view(b, length, -1)
        return self.highway(torch.cat([c, self.words(words)], dim=2))

    def drop(self, x):
        return F.dropout(x, self.dropout, self.training)

    def forward(self, cw, cc, qw, qc, c_len, q_len):
        """Start and end logits (B, Lc), padding at NEG. c_len, q_len: (B,) int64 on the CPU."""
        c_mask, q_mask = cw != squad.PAD, qw != squad.PAD
        # The seed drops the question's input to the shared LSTM but not the context's
        # (basic/model.py:174-178: d_cell_fw for u, cell_fw for h).
        # Each BiLSTM with drop=True drops its input with one mask per direction.
        H = self.context(self.embed(cw, cc), c_len)                         # (B, Lc, 2h)
        U = self.context(self.embed(qw, qc), q_len, drop=True)              # (B, Lq, 2h)

        # S = w_h.h_t + w_u.u_j + (w_hu * h_t).u_j: the same as w.[h; u; h*u], without the (B, Lc, Lq, 6h) tensor.
        w_h, w_u, w_hu = self.similarity.weight.view(3, -1)
        S = (H @ w_h).unsqueeze(2) + (U @ w_u).unsqueeze(1) + (H * w_hu) @ U.transpose(1, 2)
        S = S.masked_fill(~q_mask.unsqueeze(1), NEG)                        # (B, Lc, Lq)
        U_tilde = torch.softmax(S, dim=2) @ U                               # context-to-query
        b = torch.softmax(S.amax(dim=2).masked_fill(~c_mask, NEG), dim=1)   # query-to-context
        h_tilde = (b.unsqueeze(1) @ H).expand_as(H)
        G = torch.cat([H, U_tilde, H * U_tilde, H * h_tilde], dim=2)        # (B, Lc, 8h)

        M = self.modeling2(self.modeling1(G, c_len, drop=True), c_len, drop=True)   # (B, Lc, 2h)
        start = self.start(self.drop(torch.cat([G, M], dim=2))).squeeze(2).masked_fill(~c_mask, NEG)
        # The end pointer reads where the start pointer looks (basic/model.py:213-217): M summed
        # under softmax(start), the same vector at every position.
        a = (torch.softmax(start, dim=1).unsqueeze(1) @ M).expand_as(M)    # (B, Lc, 2h)
        M2 = self.end_lstm(torch.cat([G, M, a, M * a], dim=2), c_len, drop=True)
        end = self.end(self.drop(torch.cat([G, M2], dim=2))).squeeze(2)
        return start, end.masked_fill(~c_mask, NEG)


def count_parameters(net: nn.Module) -> int:
    """Trainable parameters: the frozen GloVe table is a buffer, not counted."""
    return sum(p.numel() for p in net.parameters() if p.requires_grad)


# ----------------------------------------------------------------------------------------------
# Batches, the step, the average

def to_device(batch: dict[str, np.ndarray], device: torch.device) -> tuple:
    """A common.squad batch as the network's arguments: ids on the device, lengths on the CPU
    (pack_padded_sequence wants them there; counting them here saves a device sync per LSTM)."""
    ids = [torch.from_numpy(batch[k]).to(device, non_blocking=True) for k in ("cw", "cc", "qw", "qc")]
    # A length of at least 1: an empty context or question (none in SQuAD) still packs.
    lengths = [torch.from_numpy(np.maximum((batch[k] != squad.PAD).sum(1), 1)) for k in ("cw", "qw")]
    return (*ids, *lengths)


def span_loss(start, end, y1, y2):
    return F.cross_entropy(start, y1) + F.cross_entropy(end, y2)


class EMA:
    """shadow = decay * shadow + (1 - decay) * weight after every step, starting from the initial
    weights (as tf.train.ExponentialMovingAverage without num_updates, and Keras' use_ema)."""

    def __init__(self, net: nn.Module, decay: float):
        self.decay = decay
        self.names = [n for n, p in net.named_parameters() if p.requires_grad]
        self.params = [p for p in net.parameters() if p.requires_grad]
        self.shadow = [p.detach().clone() for p in self.params]

    @torch.no_grad()
    def update(self) -> None:
        torch._foreach_lerp_(self.shadow, self.params, 1.0 - self.decay)

    def state_dict(self) -> dict[str, torch.Tensor]:
        return dict(zip(self.names, self.shadow))


def train_step(model: nn.Module, opt: torch.optim.Optimizer, ema: EMA, batch: dict[str, np.ndarray],
               device: torch.device) -> torch.Tensor:
    """One Adam step on a batch, then the average; the loss (on the device: no sync here)."""
    start, end = model(*to_device(batch, device))
    loss = span_loss(start, end, torch.from_numpy(batch["y1"]).to(device), torch.from_numpy(batch["y2"]).to(device))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    ema.update()
    return loss.detach()


# ----------------------------------------------------------------------------------------------
# The reference the harness drives

class BiDAFReference(TorchReference):
    net: BiDAF | None = None

    def setup(self, ctx):
        self.ctx, cfg = ctx, ctx.config
        self.init_torch(ctx)
        glove = squad.view_file(ctx.data_root, "glove", f"{cfg['glove']}.txt")
        if ctx.serves:      # infer's timed server: no question before its request, so every GloVe word
            self.words, vectors = squad.read_glove(glove, None, cfg["word_dim"])
            self.word_vectors = torch.from_numpy(vectors)
            return
        if not ctx.trains:
            # The predictor: the dev questions (no answers) and GloVe for their words; the network
            # waits for load(), which brings the trainer's character list (the embedding's size).
            self.paragraphs, self.questions = squad.read_squad(squad.view_file(ctx.data_root, "squad", QUESTIONS_FILE))
            self.words, vectors = squad.read_glove(glove, squad.data_words(self.paragraphs, self.questions),
                                                   cfg["word_dim"])
            self.word_vectors = torch.from_numpy(vectors)
            return

        paragraphs, questions = squad.read_squad(squad.view_file(ctx.data_root, "squad", TRAIN_FILE))
        self.paragraphs = paragraphs
        self.train = squad.trainable(paragraphs, questions, cfg["max_context"], cfg["max_question"])
        if not self.train:
            raise ValueError(f"no training question fits max_context {cfg['max_context']} and "
                             f"max_question {cfg['max_question']}")
        words, vectors = squad.read_glove(glove, squad.data_words(paragraphs, questions), cfg["word_dim"])
        word_counts, char_counts = squad.seed_counts(paragraphs, questions)
        self.chars = squad.char_table(char_counts, cfg["char_min_count"])
        self.learned = squad.learned_words(word_counts, words, cfg["word_min_count"])
        self.encoder = squad.Encoder.build(words, self.chars, cfg["max_word_chars"], self.learned)
        self.net = BiDAF(torch.from_numpy(vectors), len(self.chars) + 2, cfg, len(self.learned)).to(self.device)
        # device_ids=None (allowed for a one-device module): DDP then leaves the inputs where they
        # are, and the lengths stay on the CPU for pack_padded_sequence.
        self.model = DistributedDataParallel(self.net, device_ids=None) if self.distributed else self.net
        self.opt = torch.optim.Adam([p for p in self.net.parameters() if p.requires_grad], lr=cfg["lr"])
        self.ema = EMA(self.net, cfg["ema_decay"])

    def rank_batches(self, epoch: int) -> list[list[int]]:
        """This rank's share of each batch of the epoch: every rank draws the same order (seed,
        epoch) and takes every world_size-th question of each batch; with several ranks, a batch
        smaller than the rank count (the end of a length window) is skipped by all of them."""
        ctx = self.ctx
        order = squad.batch_order(self.paragraphs, self.train, ctx.config["batch_size"],
                                  np.random.default_rng((ctx.seed, epoch)))
        if ctx.world_size == 1:
            return order
        return [b[ctx.rank::ctx.world_size] for b in order if len(b) >= ctx.world_size]

    def train_epoch(self, epoch):
        self.model.train()
        batches = self.rank_batches(epoch)
        total, samples = torch.zeros((), device=self.device), 0
        for batch in self.ctx.progress(batches, total=len(batches), desc=f"epoch {epoch}"):
            questions = [self.train[i] for i in batch]
            total += train_step(self.model, self.opt, self.ema,
                                squad.make_batch(self.encoder, self.paragraphs, questions), self.device)
            samples += len(questions)
        return {"loss": total.item() / len(batches), "samples": samples, "lr": self.ctx.config["lr"]}

    # Saving and loading: the averaged weights, the character list and the learned words (GloVe is
    # not a learned weight).

    def save(self, path: Path) -> None:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        torch.save(self.ema.state_dict(), path / MODEL_FILE)
        (path / CHARS_FILE).write_text(json.dumps(self.chars, ensure_ascii=False), encoding="utf-8")
        (path / WORDS_FILE).write_text(json.dumps(self.learned, ensure_ascii=False), encoding="utf-8")
        (path / CONFIG_FILE).write_text(json.dumps(self.ctx.config, indent=2))

    def load(self, path: Path) -> None:
        cfg = self.ctx.config
        chars = json.loads((Path(path) / CHARS_FILE).read_text(encoding="utf-8"))
        learned = json.loads((Path(path) / WORDS_FILE).read_text(encoding="utf-8"))
        self.net = BiDAF(self.word_vectors, len(chars) + 2, cfg, len(learned)).to(self.device)
        self.net.load_state_dict(torch.load(Path(path) / MODEL_FILE, map_location=self.device))
        self.net.eval()
        self.encoder = squad.Encoder.build(self.words, chars, cfg["max_word_chars"], learned, any_casing=self.ctx.serves)

    # Prediction: the most likely span (start <= end; at most max_span tokens if it is not 0), as
    # the exact context text.

    @torch.inference_mode()
    def answers(self, questions: list[squad.Question], paragraphs: list[squad.Paragraph] | None = None) -> list[str]:
        paragraphs = self.paragraphs if paragraphs is None else paragraphs
        self.net.eval()
        batch = squad.make_batch(self.encoder, paragraphs, questions)
        start, end = self.net(*to_device(batch, self.device))
        p1, p2 = torch.softmax(start, 1).cpu().numpy(), torch.softmax(end, 1).cpu().numpy()
        lengths = np.array([len(paragraphs[q.paragraph].tokens) for q in questions])
        s, e = squad.best_spans(p1, p2, lengths, self.ctx.config["max_span"] or None)
        return [squad.answer_text(paragraphs[q.paragraph], int(i), int(j)) if lengths[k] else ""
                for k, (q, i, j) in enumerate(zip(questions, s, e))]

    def predict(self):
        out = {}
        for batch in squad.batch_order(self.paragraphs, self.questions, self.ctx.config["eval_batch_size"], None):
            questions = [self.questions[i] for i in batch]
            out.update(zip((q.id for q in questions), self.answers(questions)))
        return out

    def eval_inputs(self):
        return [squad.to_wire(self.paragraphs[q.paragraph], q) for q in self.questions]

    def infer(self, example):
        paragraph, question = squad.from_wire(example)
        return self.answers([question], [paragraph])[0]
