"""PyTorch inference as a service runs it, unmodified user code (no
hybridsync, no CUDA flags): per step a batch of 32 text requests is
tokenised in pure Python and NumPy (userloop.tokenise), copied to the
device, run through 6 Linear+GELU layers and a softmax, copied back
(.cpu(), the step's wait) and decoded into a JSON response
(userloop.decode). The host work takes --host-share of a step alone
(default 0.45; userloop says how it is calibrated).
Usage: python3 torch_infer_host.py [--seconds S | --steps N] [--host-share F | --host-units N]
Prints one JSON line: {"program","steps","wall_s","cpu_s"} (timed loop
only) and "host_units" (words per request) and "host_s" (the host work's
seconds in the timed loop)."""
import torch

import userloop

DIM, LABELS = 256, 512


class Classifier:
    def __init__(self):
        dims = [DIM, 512, 512, 384, 512, 384, LABELS]
        layers = []
        for i in range(len(dims) - 1):
            layers += [torch.nn.Linear(dims[i], dims[i + 1]), torch.nn.GELU()]
        self.model = torch.nn.Sequential(*layers[:-1]).cuda().eval()
        self.labels = ["label%03d" % i for i in range(LABELS)]

    def forward(self, x):
        """The device part: launches only, no wait."""
        with torch.inference_mode():
            return torch.softmax(self.model(x), dim=1)


def setup(batch=32, share=None, units=None):
    """The step and what the JSON line reports."""
    share, units = userloop.host_settings(share, units)
    c = Classifier()
    text = lambda words: userloop.TextPipeline(words, batch, DIM, c.labels)
    x0 = torch.from_numpy(text(8).pre()).cuda()
    probs0 = c.forward(x0).cpu().numpy()

    def make(words):
        t = text(words)

        def host_work():
            t.pre()
            t.post(probs0)
        return host_work
    units = userloop.sized("torch_infer_host", "words per request", make, lambda: c.forward(x0), share, units)
    t, host = text(units), userloop.HostTimer()

    def step():
        x = torch.from_numpy(host(t.pre)).cuda()
        probs = c.forward(x).cpu().numpy()
        return host(t.post, probs)
    return step, lambda: {"host_units": units, "host_s": host.s}


def build():
    """Returns the step function (imported by inproc.py): the host share
    from $APPS_HOST_SHARE or the default."""
    return setup()[0]


if __name__ == "__main__":
    # warm-up: allocator, cuBLAS handles, lazy module loading
    userloop.main("torch_infer_host", setup, batch=32, warmup=200)
