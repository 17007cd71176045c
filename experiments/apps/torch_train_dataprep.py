"""PyTorch training with its data preparation on the host, unmodified
user code (no hybridsync, no CUDA flags): per step a batch of 64 images
is augmented in NumPy and Python (userloop.Augment: RandAugment-like ops
per sample, then smoothing, normalisation and pooling over the batch),
copied to the device, and a small MLP block with LayerNorm runs forward,
backward and an Adam step, then loss.item() (the step's wait). The data
preparation takes --host-share of a step alone (default 0.45; userloop
says how it is calibrated).
Usage: python3 torch_train_dataprep.py [--seconds S | --steps N] [--host-share F | --host-units N]
Prints one JSON line: {"program","steps","wall_s","cpu_s"} (timed loop
only) and "host_units" (augmentation ops per batch) and "host_s" (the
data preparation's seconds in the timed loop)."""
import torch

import userloop


class Trainer:
    """The model, its optimizer and the device part of a step."""

    def __init__(self):
        d = 256
        self.model = torch.nn.Sequential(
            torch.nn.Linear(d, 4 * d), torch.nn.GELU(), torch.nn.Linear(4 * d, d), torch.nn.LayerNorm(d),
            torch.nn.Linear(d, 4 * d), torch.nn.GELU(), torch.nn.Linear(4 * d, d), torch.nn.LayerNorm(d),
            torch.nn.Linear(d, 10),
        ).cuda()
        self.opt = torch.optim.Adam(self.model.parameters(), lr=1e-3)
        self.lossf = torch.nn.CrossEntropyLoss()

    @staticmethod
    def to_device(batch):
        """The host-to-device copies (from pageable memory: each waits)."""
        x, y = batch
        return torch.from_numpy(x).cuda(), torch.from_numpy(y).cuda()

    def update(self, x, y):
        """Forward, backward and the Adam step: launches only, no wait.
        Returns the loss, on the device."""
        self.opt.zero_grad(set_to_none=True)
        loss = self.lossf(self.model(x), y)
        loss.backward()
        self.opt.step()
        return loss

    def sized(self, name, batch, share, units):
        """The augmentation ops per batch for the share (userloop.sized)."""
        x, y = self.to_device(userloop.Augment(0, batch).batch_of_next())

        def make(ops):
            return userloop.Augment(ops, batch).batch_of_next
        return userloop.sized(name, "augmentation ops per batch", make, lambda: self.update(x, y), share, units)


def setup(batch=64, share=None, units=None):
    """The step and what the JSON line reports."""
    share, units = userloop.host_settings(share, units)
    tr = Trainer()
    aug = userloop.Augment(tr.sized("torch_train_dataprep", batch, share, units), batch)
    host = userloop.HostTimer()

    def step():
        x, y = tr.to_device(host(aug.batch_of_next))
        return tr.update(x, y).item()
    return step, lambda: {"host_units": aug.ops, "host_s": host.s}


def build():
    """Returns the step function (imported by inproc.py): the host share
    from $APPS_HOST_SHARE or the default."""
    return setup()[0]


if __name__ == "__main__":
    userloop.main("torch_train_dataprep", setup, batch=64, warmup=50)
