"""PyTorch training with a data-loading thread, unmodified user code (no
hybridsync, no CUDA flags): the main thread launches the steps of
torch_train_dataprep.py's model (copy in, forward, backward, Adam step,
loss.item()) while a Python thread prepares the next batches
(userloop.Preparer, two ahead, as a DataLoader's prefetch; the same
userloop.Augment as torch_train_dataprep.py). Each step hands the
preparer the next batch's indices and takes the batch it prepared.

Both threads are busy on the program's one CPU, and share the GIL: the
preparer's per-sample Python holds it, its whole-batch NumPy loops
release it (userloop.Augment), and PyTorch releases it inside its calls
(synchronize, copies, .item()'s wait), so that while the main thread
waits on the device the preparer runs Python. Python hands the GIL over
every 5 ms (sys.getswitchinterval) when both want it. Only the main
thread calls CUDA (userloop.Preparer says why).

The preparer's work per batch takes --host-share of a step alone without
it (default 0.45; userloop says how it is calibrated).
Usage: python3 torch_two_threads.py [--seconds S | --steps N] [--host-share F | --host-units N]
Prints one JSON line: {"program","steps","wall_s","cpu_s"} (timed loop
only; CPU of both threads) and "host_units" (augmentation ops per batch),
"host_s" (the preparer's seconds preparing) and "wait_s" (the main
thread's seconds waiting for a batch) in the timed loop."""
import userloop
from torch_train_dataprep import Trainer


def setup(batch=64, share=None, units=None):
    """The step and what the JSON line reports. The preparer thread runs
    from here on, as a daemon: the process may end with it waiting."""
    share, units = userloop.host_settings(share, units)
    tr = Trainer()
    aug = userloop.Augment(tr.sized("torch_two_threads", batch, share, units), batch)
    prep = userloop.Preparer(aug.prepare, aug.sample)

    def step():
        x, y = tr.to_device(prep.get())
        return tr.update(x, y).item()
    return step, lambda: {"host_units": aug.ops, "host_s": prep.host.s, "wait_s": prep.wait.s}


def build():
    """Returns the step function (imported by inproc.py): the host share
    from $APPS_HOST_SHARE or the default."""
    return setup()[0]


if __name__ == "__main__":
    userloop.main("torch_two_threads", setup, batch=64, warmup=50)
