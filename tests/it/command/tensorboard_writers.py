# The command of user_command_torch::a_commands_tensorboard_scalars_become_its_metrics
# (issue #42): real writers' scalars in every layout envgen's import reads,
# then what TensorBoard itself shows of them, into tb-shown.json.
import json
import time

import numpy as np
from tensorboard.backend.event_processing import plugin_event_multiplexer
from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2, types_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter
from tensorboard.util import tensor_util
from torch.utils.tensorboard import SummaryWriter

w = SummaryWriter("logs/tb")
for step in range(1, 6):
    w.add_scalar("loss", 1.0 / step, step)  # simple_value
    w.add_scalar("train/lr", 0.1 * step, step)
    w.add_scalar("acc", 0.3 * step, step, new_style=True)  # a tensor's float_val
    # One subfolder per series (logs/tb/split_train/, …), each with tag "split".
    w.add_scalars("split", {"train": 2.0 / step, "val": 3.0 / step}, step)
w.add_histogram("weights", np.arange(10.0), 1)
w.add_text("note", "not a number", 1)
w.close()

# TensorFlow 2's tf.summary.scalar as TensorFlow writes it, without
# TensorFlow: a rank-0 tensor of the scalars plugin whose value is the
# little-endian bytes in tensor_content (SummaryFileWriter::WriteTensor calls
# Tensor::AsProtoTensorContent, tensorflow/core/summary/summary_file_writer.cc);
# the other dtypes as tf.summary.write would store them.
keras = EventFileWriter("logs/tb/keras")
plugin = summary_pb2.SummaryMetadata(
    plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars")
)


def tensor_value(tag, dtype, content, dims=()):
    dim = [tensor_shape_pb2.TensorShapeProto.Dim(size=d) for d in dims]
    tensor = tensor_pb2.TensorProto(
        dtype=dtype, tensor_shape=tensor_shape_pb2.TensorShapeProto(dim=dim), tensor_content=content
    )
    return summary_pb2.Summary.Value(tag=tag, tensor=tensor, metadata=plugin)


for step in range(1, 6):
    x = 0.7 / step
    # bfloat16: the upper half of the float32's bits (numpy has no bfloat16).
    bf16 = (np.array([x], "<f4").view("<u4") >> 16).astype("<u2").tobytes()
    values = [
        tensor_value("epoch_loss", types_pb2.DT_FLOAT, np.array(x, "<f4").tobytes()),
        tensor_value("f64", types_pb2.DT_DOUBLE, np.array(x, "<f8").tobytes()),
        tensor_value("f16", types_pb2.DT_HALF, np.array(x, "<f2").tobytes()),
        tensor_value("bf16", types_pb2.DT_BFLOAT16, bf16),
        tensor_value("i64", types_pb2.DT_INT64, np.array(-3 * step, "<i8").tobytes()),
        tensor_value("u8", types_pb2.DT_UINT8, np.array(step, "<u1").tobytes()),
        tensor_value("vector", types_pb2.DT_FLOAT, np.zeros(3, "<f4").tobytes(), dims=(3,)),
    ]
    summary = summary_pb2.Summary(value=values)
    keras.add_event(event_pb2.Event(step=step, wall_time=time.time(), summary=summary))
keras.close()

# What TensorBoard's scalars dashboard lists, read as its data provider
# reads it (every scalar a tensor): {run/tag: [[step, value, wall_time, dtype]]}.
mux = plugin_event_multiplexer.EventMultiplexer()
mux.AddRunsFromDirectory("logs/tb")
mux.Reload()
shown, not_one_number = {}, []
for run, tags in sorted(mux.PluginRunToTagToContent("scalars").items()):
    for tag in tags:
        key = tag if run == "." else f"{run}/{tag}"
        for e in mux.Tensors(run, tag):
            proto = e.tensor_proto
            if proto.dtype == types_pb2.DT_BFLOAT16:
                # TensorBoard without TensorFlow has no bfloat16 type to
                # decode it with: the format's definition, an f32's top half.
                raw = np.frombuffer(proto.tensor_content, "<u2").astype("<u4") << 16
                array = raw.view("<f4")
            else:
                array = tensor_util.make_ndarray(proto)
            if array.size != 1:
                not_one_number.append(key)
                continue
            name = types_pb2.DataType.Name(proto.dtype)
            shown.setdefault(key, []).append([e.step, float(array.item()), e.wall_time, name])
with open("tb-shown.json", "w") as f:
    json.dump({"shown": shown, "not_one_number": sorted(set(not_one_number))}, f)
print("logged", flush=True)
