"""ferry.torch: a torch.nn.Module's parameters kept on a Ferry job.

FerryParameterServer declares a module's parameters as the job's tensors
(one per named parameter, in named_parameters() order), pulls the job's
weights straight into the parameters' storage and pushes their .grad, all
through ferry.Client without copying a tensor. It replaces the optimizer of
a PyTorch loop: the servers apply the job's optimizer (Client(optimizer=...),
SGD by default) with its lr.

    model = Net()
    with ferry.Client(url, rank, lr=0.1) as c:
        ps = FerryParameterServer(model, c)   # declares
        ps.start()                            # rank 0 offers, all pull v0
        for x, y in loader:
            model.zero_grad(set_to_none=True)
            F.cross_entropy(model(x), y).backward()
            ps.step(len(x))                   # push grads, pull v+1

Ferry sums gradients: a push carries the SUM over its samples and the
servers divide by the job's total samples. PyTorch losses default to the
mean, so by default (grad_is_mean=True) step() and push() multiply each
.grad by n_samples in place first; with a loss of reduction="sum", pass
grad_is_mean=False and the gradients go as they are.

Writing a pull into a parameter's storage is what an optimizer's
`p.data` update does: it is invisible to autograd, so pull between steps,
not between a forward pass and its backward.
"""
import torch

from .client import Client
from .errors import InvalidArgument


class FerryParameterServer:
    """Drive model's parameters from a Ferry job through client.

    FerryParameterServer(model, client, grad_is_mean=True, declare=True)
    declares the parameters (client.declare) unless declare=False (the
    caller declared the same table). Every parameter must be a contiguous
    float32 CPU tensor (InvalidArgument naming it otherwise). Parameters
    without a .grad at push time (unused in this step) push zeros.
    """

    def __init__(self, model, client, *, grad_is_mean=True, declare=True):
        if not isinstance(client, Client):
            raise TypeError(f"client must be a ferry.Client, got {type(client).__name__}")
        self.model = model
        self.client = client
        self.grad_is_mean = grad_is_mean
        named = list(model.named_parameters())
        if not named:
            raise InvalidArgument("declare", "the model has no parameters")
        for name, p in named:
            why = None
            if p.dtype != torch.float32:
                why = f"dtype {p.dtype}"
            elif p.device.type != "cpu":
                why = f"on {p.device}"
            elif not p.is_contiguous():
                why = "not contiguous"
            if why:
                raise InvalidArgument("declare", f"parameter {name!r}: {why}; Ferry holds "
                                      "contiguous float32 CPU tensors")
        self.names = [n for n, _ in named]
        self.params = [p for _, p in named]
        self._zeros = [None] * len(self.params)  # pushed for a missing .grad
        if declare:
            client.declare([(n, p.numel()) for n, p in named])

    def init_weights(self):
        """Offer the model's current parameters as the job's version 0
        (client.init_weights; the first offer to reach a server wins)."""
        self.client.init_weights(self.params)

    def pull(self):
        """Pull the version this client is due into the parameters, in
        place (their storage; no autograd record)."""
        self.client.pull(self.params)

    def start(self):
        """The opening of a loop: rank 0 offers the model's weights, then
        every rank pulls version 0, so all ranks start from rank 0's."""
        if self.client.rank == 0:
            self.init_weights()
        self.pull()

    def grads(self, n_samples):
        """The tensors a push sends: each parameter's .grad (scaled in place
        by n_samples when grad_is_mean), or zeros when it has none."""
        out = []
        for i, p in enumerate(self.params):
            g = p.grad
            if g is None:
                if self._zeros[i] is None:
                    self._zeros[i] = torch.zeros_like(p, memory_format=torch.contiguous_format)
                out.append(self._zeros[i])
                continue
            if self.grad_is_mean:
                g.mul_(n_samples)
            out.append(g)
        return out

    def push(self, n_samples):
        """Push the gradients of a step over n_samples samples (client.push).
        With grad_is_mean, .grad is left multiplied by n_samples."""
        self.client.push(self.grads(n_samples), n_samples)

    def step(self, n_samples):
        """Push the gradients and pull the next version into the
        parameters in one round trip (client.push_pull). With
        grad_is_mean, .grad is left multiplied by n_samples."""
        self.client.push_pull(self.grads(n_samples), n_samples, self.params)

    def zero_grad(self, set_to_none=True):
        """model.zero_grad(set_to_none): for loops written around an
        optimizer's zero_grad()."""
        self.model.zero_grad(set_to_none=set_to_none)
