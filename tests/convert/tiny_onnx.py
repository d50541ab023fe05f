"""A tiny graph shaped like kokoro-onnx's export (test helper): unnamed weights, found by node scope."""

from __future__ import annotations

from pathlib import Path

import numpy as np

T, D_IN, D_LIN, HIDDEN, C_IN, C_OUT, K, L = 7, 8, 16, 6, 4, 5, 3, 10  # sizes of the toy layers


def make_weights(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)

    def r(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32) * 0.5

    return {
        "onnx::MatMul_1": r(D_IN, D_LIN),  # x @ W: (in, out), transposed relative to nn.Linear
        "encoder.bert_encoder.bias": r(D_LIN),
        "onnx::LSTM_2": r(2, 4 * HIDDEN, D_LIN),  # W, gates (i, o, f, c)
        "onnx::LSTM_3": r(2, 4 * HIDDEN, HIDDEN),  # R
        "onnx::LSTM_4": r(2, 8 * HIDDEN),  # B = [Wb, Rb]
        "/encoder/text_encoder/cnn.0/Mul_output_0": r(C_OUT, C_IN, K),  # a weight-normed conv, folded by export
        "encoder.text_encoder.cnn.0.0.bias": r(C_OUT),
    }


def write_tiny_onnx(path: Path, weights: dict[str, np.ndarray]) -> Path:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    nodes = [
        helper.make_node("MatMul", ["x", "onnx::MatMul_1"], ["mm"], name="/encoder/bert_encoder/MatMul"),
        helper.make_node("Add", ["mm", "encoder.bert_encoder.bias"], ["lin"], name="/encoder/bert_encoder/Add"),
        helper.make_node("Transpose", ["lin"], ["xt"], perm=[1, 0, 2], name="/encoder/predictor/lstm/Transpose"),
        helper.make_node(
            "LSTM",
            ["xt", "onnx::LSTM_2", "onnx::LSTM_3", "onnx::LSTM_4"],
            ["y"],
            hidden_size=HIDDEN,
            direction="bidirectional",
            name="/encoder/predictor/lstm/LSTM",
        ),
        helper.make_node(
            "Conv",
            ["c", "/encoder/text_encoder/cnn.0/Mul_output_0", "encoder.text_encoder.cnn.0.0.bias"],
            ["conv"],
            pads=[1, 1],
            name="/encoder/text_encoder/cnn.0/cnn.0.0/Conv",
        ),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny_kokoro",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, T, D_IN]),
            helper.make_tensor_value_info("c", TensorProto.FLOAT, [1, C_IN, L]),
        ],
        [
            helper.make_tensor_value_info("lin", TensorProto.FLOAT, [1, T, D_LIN]),
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [T, 2, 1, HIDDEN]),
            helper.make_tensor_value_info("conv", TensorProto.FLOAT, [1, C_OUT, L]),
        ],
        [numpy_helper.from_array(v, name=k) for k, v in weights.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path
