"""squad-bidaf-tensorflow: BiDAF (Seo et al., ICLR 2017, arXiv:1611.01603) on SQuAD v1.1 in
TensorFlow 2 / Keras 3, the model and framework of DAWNBench's seed SQuAD entry.

The same network and recipe as squad-bidaf-pytorch's train.py (one shared spec, the same
hyperparameter names in reference.toml), so the two frameworks can be compared on one recipe; their
trainable parameter counts differ only by PyTorch's second LSTM bias (8 x 4 x hidden, see
count_parameters). Read top to bottom; to fork, `cp -r` this directory and edit this file.
The anchor is the DAWNBench seed's code, stanford-futuredata/dawn-bench-models
tensorflow/SQuAD/basic (a copy of allenai/bi-att-flow): where it and the paper differ, this file
follows the code (README: the recipe-vs-anchor table).

The network, for a context of Lc tokens and a question of Lq tokens (h = hidden):
  1. character embedding: each token's first max_word_chars characters -> Embedding(char_dim),
     dropout, Conv1D(char_filters, char_width, 'valid'), ReLU, max over the characters;
  2. word embedding: frozen GloVe vectors (not a learned weight: each role looks its own words up
     in the GloVe file it sees), and a trained table for the unknown word and the frequent training
     words GloVe lacks (common.squad.learned_words; saved with the model);
  3. concatenated (char_filters + word_dim = d0), then `highway_layers` highway layers; the same
     layers embed the context and the question;
  4. contextual layer: one bidirectional LSTM shared by context and question -> H (Lc, 2h), U (Lq, 2h);
  5. attention flow: S[t, j] = w_s . [h_t; u_j; h_t * u_j] (6h weights, no bias); context-to-query
     U~ = softmax_j(S) U; query-to-context b = softmax_t(max_j S), h~ = sum_t b_t h_t;
     G = [H; U~; H * U~; H * h~] (8h);
  6. modeling layer: two bidirectional LSTMs -> M (2h);
  7. output: start logits w_p1 . [G; M]; a = softmax(start logits) M, tiled over the context;
     M2 = bidirectional LSTM([G; M; a; M * a]) (14h in); end logits w_p2 . [G; M2].
Padding is masked everywhere (-1e30 before every softmax); the loss is the cross-entropy of the
start plus that of the end, averaged over the batch. The LSTMs are keras.layers.LSTM inside
keras.layers.Bidirectional, called with the padding mask: the batches are right-padded, which is
what Keras 3 needs to run them on cuDNN on a GPU (a fully masked row would send it back to the slow
kernel, so every row keeps its first position).

The recipe: Adam (lr 0.001, default betas and epsilon), batches of 60 questions, dropout 0.2 where
the seed has it (the character embedding, the question's contextual LSTM input but not the
context's, both modeling layers' inputs, the end LSTM's input, the inputs of the start and end
logits), and an exponential moving average (0.999) of every
trainable weight, updated after each step: the saved, evaluated model is the average. One device:
no tf.distribute (a batch of 60 questions does not fill one modern GPU; see README).

The harness times and scores everything; this file never sees the dev answers. The trainer sees
squad/train-v1.1.json and the GloVe file; the predictor squad/dev-v1.1.questions.json (the dev
file without its answers) and the GloVe file.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")   # keep TensorFlow's start-up chatter off stderr

import keras
import numpy as np
import tensorflow as tf
from keras import layers

from common import squad
from common.tf_base import KerasReference

WEIGHTS_FILE = "bidaf-ema.weights.npz"    # the EMA weights, one array per variable path
CHARS_FILE = "chars.json"                 # the trainer's character list: the predictor's Encoder needs it
WORDS_FILE = "words.json"                 # the learned words, in the order of their trained rows
CONFIG_FILE = "config.json"
TRAIN_FILE, DEV_FILE = "train-v1.1.json", "dev-v1.1.questions.json"
NEG = -1e30                               # the logit of a padded position


# ----------------------------------------------------------------------------------------------
# Data files: each role reads only what its view holds

def device() -> str:
    """The first GPU, else the host: where the word table and each batch live."""
    return "/GPU:0" if tf.config.list_logical_devices("GPU") else "/CPU:0"


# ----------------------------------------------------------------------------------------------
# The network

class BiLSTM(layers.Bidirectional):
    """A bidirectional LSTM of `hidden` units a direction, its outputs concatenated (2h). Keras's
    defaults (tanh, sigmoid, a bias, no recurrent dropout, not unrolled) are cuDNN's conditions.
    Called with `drop`, each direction drops its own mask on the input (rate `rate`), as the seed's
    one SwitchableDropoutWrapper per cell (basic/model.py:154-169: input_keep_prob on each of cell_fw
    and cell_bw); keras.layers.Bidirectional gives both the same input. Otherwise Bidirectional's own
    path for a masked call (the two layers, the backward one's output flipped)."""

    def __init__(self, hidden: int, name: str, rate: float = 0.0):
        super().__init__(layers.LSTM(hidden, return_sequences=True, name=name), name=f"{name}_bi")
        self.drop = layers.Dropout(rate, name=f"{name}_dropout")

    def call(self, sequences, mask=None, training=None, drop=False):
        forward_in, backward_in = sequences, sequences
        if drop:
            forward_in, backward_in = (self.drop(sequences, training=training) for _ in range(2))
        y = self.forward_layer(forward_in, mask=mask, training=training)
        y_rev = self.backward_layer(backward_in, mask=mask, training=training)
        return tf.concat([y, tf.reverse(y_rev, axis=[1])], axis=-1)


class Similarity(layers.Layer):
    """S[b, t, j] = w . [h_t; u_j; h_t * u_j], without building the (Lc, Lq, 6h) tensor: w is split
    into its three 2h parts (one (6h, 1) kernel, as Dense(1, use_bias=False) would have)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True      # the caller masks S itself; this only silences Keras's warning

    def compute_mask(self, inputs, previous_mask=None):
        return None

    def build(self, h_shape, u_shape=None):
        self.kernel = self.add_weight(shape=(3 * h_shape[-1], 1), initializer="glorot_uniform", name="kernel")

    def call(self, h, u):
        w_h, w_u, w_hu = tf.split(self.kernel, 3, axis=0)
        return (tf.matmul(h, w_h)                                         # (B, Lc, 1)
                + tf.transpose(tf.matmul(u, w_u), [0, 2, 1])              # (B, 1, Lq)
                + tf.matmul(h * tf.transpose(w_hu), u, transpose_b=True))  # (B, Lc, Lq)


def masked_logits(logits, mask):
    return tf.where(mask, logits, NEG)


class BiDAF(keras.Model):
    """Batches of ids (common.squad.make_batch's cw, cc, qw, qc) -> start and end logits (B, Lc),
    padding at -1e30. The frozen word table is a constant of the model, not a weight: it is not
    trained, not counted and not saved, and each role gives its own (`word_vectors`: read_glove's
    table, rows 0 and 1 unused). n_learned: the learned words (common.squad.Encoder's ids
    2 .. n_learned + 1), each with a trained row."""

    def __init__(self, word_vectors: np.ndarray, n_chars: int, cfg: dict, n_learned: int = 0):
        super().__init__(name="bidaf")
        with tf.device(device()):       # an eager constant starts on the host: copied to the GPU once
            self.word_vectors = tf.identity(tf.constant(word_vectors, tf.float32))
        h, d0 = cfg["hidden"], cfg["char_filters"] + cfg["word_dim"]
        if word_vectors.shape[1] != cfg["word_dim"]:
            raise ValueError(f"word vectors of {word_vectors.shape[1]} dimensions, word_dim {cfg['word_dim']}")
        # Padding, the unknown word and the learned words, trained, drawn from N(0, 1) as the seed's
        # (basic/main.py:76-78); padding is masked to zeros where it is read.
        self.word_embedding = layers.Embedding(n_learned + 2, cfg["word_dim"], name="word_embedding",
                                               embeddings_initializer=keras.initializers.RandomNormal(stddev=1.0))
        self.char_embedding = layers.Embedding(n_chars, cfg["char_dim"], name="char_embedding")
        self.char_conv = layers.Conv1D(cfg["char_filters"], cfg["char_width"], padding="valid",
                                       activation="relu", name="char_conv")
        self.transforms = [layers.Dense(d0, activation="relu", name=f"highway{i}_transform")
                           for i in range(cfg["highway_layers"])]
        self.gates = [layers.Dense(d0, activation="sigmoid", name=f"highway{i}_gate")
                      for i in range(cfg["highway_layers"])]
        self.contextual = BiLSTM(h, "contextual", cfg["dropout"])
        self.similarity = Similarity(name="similarity")
        self.modeling1 = BiLSTM(h, "modeling1", cfg["dropout"])
        self.modeling2 = BiLSTM(h, "modeling2", cfg["dropout"])
        self.start = layers.Dense(1, use_bias=False, name="start")
        self.end_lstm = BiLSTM(h, "end_lstm", cfg["dropout"])       # over [G; M; a; M * a]
        self.end = layers.Dense(1, use_bias=False, name="end")
        self.dropout = layers.Dropout(cfg["dropout"], name="dropout")   # no weights: one serves every place
        self.sizes = (cfg["max_word_chars"], cfg["char_dim"], d0, h)

    def build(self, input_shape=None):
        """Every weight made from the sizes alone (no forward pass: it would run the LSTMs eagerly)."""
        width, char_dim, d0, h = self.sizes
        self.word_embedding.build((None,))
        self.char_embedding.build((None, width))
        self.char_conv.build((None, width, char_dim))
        for transform, gate in zip(self.transforms, self.gates):
            transform.build((None, d0))
            gate.build((None, d0))
        self.contextual.build((None, None, d0))
        self.similarity.build((None, None, 2 * h))
        self.modeling1.build((None, None, 8 * h))
        self.modeling2.build((None, None, 2 * h))
        self.start.build((None, 10 * h))
        self.end_lstm.build((None, None, 14 * h))
        self.end.build((None, 10 * h))
        self.built = True

    def words(self, ids):
        """(B, L) word ids -> (B, L, word_dim): trained rows below n_learned + 2, GloVe above."""
        n = self.word_embedding.input_dim
        trained = self.word_embedding(tf.minimum(ids, n - 1)) * tf.cast(ids != squad.PAD, tf.float32)[..., None]
        frozen = tf.gather(self.word_vectors, tf.maximum(ids - (n - 2), 0))
        return tf.where((ids < n)[..., None], trained, frozen)

    def embed(self, words, chars, training):
        """(B, L) word ids and (B, L, W) character ids -> (B, L, d0) after the highway layers."""
        batch, length = tf.shape(chars)[0], tf.shape(chars)[1]
        chars = tf.reshape(chars, [batch * length, -1])
        # The padding character's row is trained and read like any other, as the seed's char_emb_mat
        # (basic/model.py:102, :105-106): it enters the convolution and its max for every word shorter than W.
        c = self.char_embedding(chars)                                            # (B*L, W, char_dim)
        c = self.char_conv(self.dropout(c, training=training))                    # (B*L, W-width+1, F)
        c = tf.reshape(tf.reduce_max(c, axis=1), [batch, length, self.char_conv.filters])
        x = tf.concat([c, self.words(words)], axis=-1)
        for transform, gate in zip(self.transforms, self.gates):
            g = gate(x)
            x = g * transform(x) + (1.0 - g) * x
        return x

    def lstm(self, layer, x, mask, training):
        """A BiLSTM whose input the seed drops: one mask per direction (BiLSTM)."""
        return layer(x, mask=mask, training=training, drop=True)

    def call(self, cw, cc, qw, qc, training=False):
        # Right-padded masks; every row keeps position 0 (an empty question would be a fully masked
        # row, which cuDNN refuses).
        c_mask = (cw != squad.PAD) | (tf.range(tf.shape(cw)[1]) < 1)[None, :]
        q_mask = (qw != squad.PAD) | (tf.range(tf.shape(qw)[1]) < 1)[None, :]
        # The seed drops the question's input to the shared LSTM but not the context's
        # (basic/model.py:174-178: d_cell_fw for u, cell_fw for h).
        H = self.contextual(self.embed(cw, cc, training), mask=c_mask, training=training)  # (B, Lc, 2h)
        U = self.lstm(self.contextual, self.embed(qw, qc, training), q_mask, training)   # (B, Lq, 2h)

        S = masked_logits(self.similarity(H, U), q_mask[:, None, :])                      # (B, Lc, Lq)
        U_tilde = tf.matmul(tf.nn.softmax(S, axis=-1), U)                                 # context-to-query
        b = tf.nn.softmax(masked_logits(tf.reduce_max(S, axis=-1), c_mask), axis=-1)      # query-to-context
        h_tilde = tf.reduce_sum(b[:, :, None] * H, axis=1, keepdims=True)                 # (B, 1, 2h)
        G = tf.concat([H, U_tilde, H * U_tilde, H * h_tilde], axis=-1)                    # (B, Lc, 8h)

        M = self.lstm(self.modeling2, self.lstm(self.modeling1, G, c_mask, training), c_mask, training)
        p1 = masked_logits(self.start(self.dropout(tf.concat([G, M], axis=-1), training=training))[..., 0], c_mask)
        # The end pointer reads where the start pointer looks (basic/model.py:213-217): M summed
        # under softmax(start), the same vector at every position.
        a = tf.broadcast_to(tf.matmul(tf.nn.softmax(p1, axis=-1)[:, None, :], M), tf.shape(M))   # (B, Lc, 2h)
        M2 = self.lstm(self.end_lstm, tf.concat([G, M, a, M * a], axis=-1), c_mask, training)
        p2 = self.end(self.dropout(tf.concat([G, M2], axis=-1), training=training))[..., 0]
        return p1, masked_logits(p2, c_mask)


def build_model(cfg: dict, word_vectors: np.ndarray, n_chars: int, n_learned: int = 0) -> BiDAF:
    """The network with its weights made."""
    model = BiDAF(word_vectors, n_chars, cfg, n_learned)
    model.build()
    return model


def count_parameters(model: keras.Model) -> int:
    """Trainable parameters (the frozen word table is a constant, not counted). With C characters
    in the list (C + 2 embedding rows: padding and unknown) and the defaults:
        char embedding 8 (C + 2) + convolution 5 x 8 x 100 + 100 + highway 2 x 2 x (200 x 200 + 200)
        + four bidirectional LSTMs 2 x (4h (in + h) + 4h), in = 200, 800, 200, 1400
        + similarity 6h + start and end 10h each + the trained word rows word_dim (K + 2)
        = 2,570,700 + 8 (C + 2) + 100 (K + 2) for K learned words; PyTorch's LSTMs have a second
        bias: + 8 x 4h = 3,200."""
    return int(sum(np.prod(v.shape) for v in model.trainable_variables))


def span_probabilities(model, cw, cc, qw, qc):
    """Start and end probabilities (B, Lc), in inference mode."""
    p1, p2 = model(cw, cc, qw, qc, training=False)
    return tf.nn.softmax(p1, axis=-1), tf.nn.softmax(p2, axis=-1)


# int64, as make_batch gives them: TensorFlow keeps int32 tensors in host memory, so int32 ids
# would be copied to the GPU inside every step.
IDS = tf.TensorSpec((None, None), tf.int64)
CHAR_IDS = tf.TensorSpec((None, None, None), tf.int64)
LABELS = tf.TensorSpec((None,), tf.int64)


def tensors(batch: dict, keys=("cw", "cc", "qw", "qc")) -> list[tf.Tensor]:
    """A batch's arrays as tensors on the device, copied once before the step."""
    with tf.device(device()):
        return [tf.identity(tf.constant(batch[k], tf.int64)) for k in keys]


def make_train_step(model: BiDAF, opt: keras.optimizers.Optimizer, ema: list[tf.Variable], decay: float):
    """One compiled step for batches of any lengths (one trace): the loss, Adam's update, then the
    moving average of every trainable weight. Not XLA-compiled: every batch has other lengths, and
    XLA would compile a program for each."""
    variables = model.trainable_variables

    @tf.function(input_signature=[IDS, CHAR_IDS, IDS, CHAR_IDS, LABELS, LABELS], autograph=False)
    def train_step(cw, cc, qw, qc, y1, y2):
        with tf.GradientTape() as tape:
            p1, p2 = model(cw, cc, qw, qc, training=True)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y1, p1)
                                  + tf.nn.sparse_softmax_cross_entropy_with_logits(y2, p2))
        opt.apply_gradients(zip(tape.gradient(loss, variables), variables))
        for average, v in zip(ema, variables):
            average.assign(decay * average + (1.0 - decay) * v)
        return loss

    return train_step


# ----------------------------------------------------------------------------------------------
# The reference the harness drives

class BiDAFKeras(KerasReference):
    """setup -> train_epoch / save in the trainer; setup -> load -> predict / eval_inputs / infer in
    the predictor. KerasReference (common/tf_base.py) gives the clock's synchronize hook and the
    recorded versions; prediction here is answer text, not class scores, so the rest is this class's."""

    def setup(self, ctx):
        self.ctx, cfg = ctx, ctx.config
        if ctx.world_size > 1:
            raise ValueError("this TensorFlow reference runs as one process on one device; "
                             "do not launch it with several ranks")
        for gpu in tf.config.list_physical_devices("GPU"):
            try:
                tf.config.experimental.set_memory_growth(gpu, True)
            except RuntimeError:          # the GPUs were initialized already (a second setup)
                pass
        self.gpu = bool(tf.config.list_logical_devices("GPU"))
        if ctx.serves:      # infer's timed server: no question before its request, so every GloVe word
            self.word_index, self.word_vectors = squad.read_glove(
                squad.view_file(ctx.data_root, "glove", f"{cfg['glove']}.txt"), None, cfg["word_dim"])
            return
        # Each role its own squad file (checked first: the GloVe file is in both views) and words.
        squad_file = squad.view_file(ctx.data_root, "squad", TRAIN_FILE if ctx.trains else DEV_FILE)
        glove_file = squad.view_file(ctx.data_root, "glove", f"{cfg['glove']}.txt")
        self.paragraphs, self.questions = squad.read_squad(squad_file)
        self.word_index, self.word_vectors = squad.read_glove(
            glove_file, squad.data_words(self.paragraphs, self.questions), cfg["word_dim"])
        if not ctx.trains:
            return        # the predictor builds its encoder and model in load(), from the trainer's characters

        # Python, NumPy and TensorFlow generators: the initial weights, the dropout masks. Only the
        # trainer draws anything (the predictor loads its weights); and TensorFlow re-instantiates a
        # traced function after every tf.random.set_seed, which costs seconds.
        keras.utils.set_random_seed(ctx.seed)
        word_counts, char_counts = squad.seed_counts(self.paragraphs, self.questions)
        self.chars = squad.char_table(char_counts, cfg["char_min_count"])
        self.learned = squad.learned_words(word_counts, self.word_index, cfg["word_min_count"])
        self.encoder = squad.Encoder.build(self.word_index, self.chars, cfg["max_word_chars"], self.learned)
        self.train_questions = squad.trainable(self.paragraphs, self.questions, cfg["max_context"], cfg["max_question"])
        if not self.train_questions:
            raise ValueError(f"no training question within max_context {cfg['max_context']} and "
                             f"max_question {cfg['max_question']} with its answer in the context")
        self.model = build_model(cfg, self.word_vectors, len(self.chars) + 2, len(self.learned))
        self.opt = keras.optimizers.Adam(learning_rate=cfg["lr"])
        self.opt.build(self.model.trainable_variables)          # its variables exist before tracing
        # The moving average starts at the initial weights, as tf.train.ExponentialMovingAverage
        # (the seed's) without num_updates.
        self.ema = [tf.Variable(v.value, trainable=False, name=f"ema_{i}")
                    for i, v in enumerate(self.model.trainable_variables)]
        self.train_step = make_train_step(self.model, self.opt, self.ema, cfg["ema_decay"])

    def train_epoch(self, epoch):
        cfg, ctx = self.ctx.config, self.ctx
        rng = np.random.default_rng([ctx.seed, epoch])
        order = squad.batch_order(self.paragraphs, self.train_questions, cfg["batch_size"], rng)
        total, samples = tf.zeros((), tf.float32), 0
        for idx in ctx.progress(order, total=len(order), desc=f"epoch {epoch}"):
            batch = squad.make_batch(self.encoder, self.paragraphs, [self.train_questions[i] for i in idx])
            total += self.train_step(*tensors(batch, ("cw", "cc", "qw", "qc", "y1", "y2"))) * len(idx)
            samples += len(idx)
        return {"loss": float(total) / samples, "samples": samples, "lr": float(cfg["lr"])}

    # Saving and loading: the moving averages, under the variables' paths, the character list and
    # the learned words.

    def save(self, path: Path) -> None:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        arrays = {v.path: a.numpy() for v, a in zip(self.model.trainable_variables, self.ema)}
        with open(path / WEIGHTS_FILE, "wb") as f:
            np.savez(f, **arrays)
        (path / CHARS_FILE).write_text(json.dumps(self.chars, ensure_ascii=True))
        (path / WORDS_FILE).write_text(json.dumps(self.learned, ensure_ascii=True))
        (path / CONFIG_FILE).write_text(json.dumps(self.ctx.config, indent=2))

    def load(self, path: Path) -> None:
        path, cfg = Path(path), self.ctx.config
        self.chars = json.loads((path / CHARS_FILE).read_text())
        self.learned = json.loads((path / WORDS_FILE).read_text())
        self.encoder = squad.Encoder.build(self.word_index, self.chars, cfg["max_word_chars"], self.learned,
                                           any_casing=self.ctx.serves)
        self.model = build_model(cfg, self.word_vectors, len(self.chars) + 2, len(self.learned))
        with np.load(path / WEIGHTS_FILE) as saved:
            names = {v.path for v in self.model.trainable_variables}
            if set(saved.files) != names:
                raise ValueError(f"{path / WEIGHTS_FILE} holds other weights than this model: "
                                 f"missing {sorted(names - set(saved.files))}, extra {sorted(set(saved.files) - names)}")
            for v in self.model.trainable_variables:
                v.assign(saved[v.path])
        spec = [IDS, CHAR_IDS, IDS, CHAR_IDS]
        self.probabilities = tf.function(lambda *x: span_probabilities(self.model, *x),
                                         input_signature=spec, autograph=False)

    # Prediction: {question id: answer text}, every dev question, in file order.

    def answers(self, questions: list[squad.Question], paragraphs: list[squad.Paragraph] | None = None) -> list[str]:
        paragraphs = self.paragraphs if paragraphs is None else paragraphs
        batch = squad.make_batch(self.encoder, paragraphs, questions)
        p1, p2 = self.probabilities(*tensors(batch))
        lengths = np.array([len(paragraphs[q.paragraph].tokens) for q in questions])
        starts, ends = squad.best_spans(p1.numpy(), p2.numpy(), lengths, self.ctx.config["max_span"] or None)
        return [squad.answer_text(paragraphs[q.paragraph], s, e) if n else ""
                for q, s, e, n in zip(questions, starts, ends, lengths)]

    def predict(self):
        out = {}
        order = squad.batch_order(self.paragraphs, self.questions, self.ctx.config["eval_batch_size"], None)
        for idx in self.ctx.progress(order, total=len(order), desc="predict"):
            questions = [self.questions[i] for i in idx]
            out.update(zip((q.id for q in questions), self.answers(questions)))
        return out

    def eval_inputs(self):
        return [squad.to_wire(self.paragraphs[q.paragraph], q) for q in self.questions]

    def infer(self, example):
        paragraph, question = squad.from_wire(example)
        return self.answers([question], [paragraph])[0]
