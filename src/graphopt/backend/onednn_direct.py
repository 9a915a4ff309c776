"""oneDNN primitives created once and executed per call (chapter 7).

What a runtime keeps between calls, in one class. A `Primitive` (`ConvPrimitive`,
`LinearPrimitive`) is made for one input (shape and strides), one weight and one
fused pattern: it asks oneDNN for a convolution (or inner product) of that shape
(which implementation: `onednn_choice`; the weight's layout: "any"), packs the
weight into that layout (a reorder, once), and creates the primitive (its machine code
generated here, once). A call then only allocates the output, points the
memory objects at this call's tensors and runs the kernel:

    torch's mkldnn op, every call:  descriptors, attributes, cache lookup,
                                    memory objects, kernel          ~25 us + kernel
    a Primitive, every call:        output, 3-4 pointers, kernel     ~5 us + kernel

The activation, or the residual add then ReLU, are post-ops as before (one
kernel). The plan (`plan.py`) keeps one primitive per module and makes a new one
when the input's shape or strides, the weight (another tensor, or written in
place) or the thread count change; so a changed weight never runs stale.
"""

from __future__ import annotations

import ctypes

import torch

from ..passes.fused_modules import ConvAddReLU, ConvReLU
from ..torch_internals import counter, dispatch_modes, version
from . import onednn_capi as capi
from . import onednn_choice, onednn_execute
from .onednn_capi import ExecArg, Handle


def supported(act) -> bool:
    """Whether a direct primitive can run a pattern ending in `act` (ch. 7)."""
    return not capi.why_unavailable() and capi.eltwise(act) != ()


def usable(x, weight, bias) -> bool:
    """Whether these tensors can be handed to oneDNN by address: a real input (not
    fake or another subclass: its data is not where data_ptr says), a contiguous
    bias, and no dispatch mode watching (the interpreter's kernel counter, a
    profiler: a primitive runs where they cannot see it, and a graph run once to
    be counted would make primitives it never reuses) (chapter 7). Each kind of
    primitive `takes` some inputs only."""
    return type(x) is torch.Tensor and (bias is None or bias.is_contiguous()) and \
        not dispatch_modes()


def _out_shape(x_shape, w_shape, stride, padding, dilation):
    n, _, h, w = x_shape
    spans = [(d * (k - 1) + 1) for d, k in zip(dilation, w_shape[2:])]
    return (n, w_shape[0], *((size + 2 * p - span) // s + 1 for size, p, span, s in
                             zip((h, w), padding, spans, stride)))


class Primitive:
    """act(op(x, W, b) [+ other]) for one input shape and strides (ch. 7).

    The subclass describes the op (`_describe`); this class packs the weight,
    makes the primitive and runs it. `key` is what it was made for: the input's
    shape and strides, the weight's version (its storage kept alive: `version`)
    and the thread count (oneDNN splits the work when it makes the primitive, and
    runs that many threads whatever torch's setting is later); `plan_call` makes a
    new one when they change."""

    refused = False

    def __init__(self, x, weight, bias, act, add: bool = False):
        self.weight, self.bias, self.add = weight, bias, add  # the module's own
        self._source = weight.detach()
        self.key = (x.shape, x.stride(), version(weight), threads())
        self.out_shape, layout = self._output(x, weight)
        self.out_strides = torch.empty(self.out_shape, memory_format=layout).stride()
        src, dst, w_shape = self._shapes(x, weight)
        plain_w, any_w = (capi.memory_desc(w_shape, torch.empty(w_shape).stride()),
                          capi.memory_desc(w_shape))
        bias_md = capi.memory_desc([weight.shape[0]], [1]) if bias is not None else None
        # every descriptor made here, freed with the primitive (__del__)
        self._mds = [capi.memory_desc(*src), capi.memory_desc(*dst), plain_w, any_w,
                     *([bias_md] if bias_md else [])]
        attr = self._attributes(act, self._mds[1] if add else None)

        def pack(pd):  # the weight, in the layout oneDNN chose for this primitive
            query = capi.library().lib.dnnl_primitive_desc_query_md
            self._packed_md = capi.clone(Handle(query(pd, capi.QUERY_WEIGHTS_MD, 0)))
            self._mds.append(self._packed_md)
            self.packed = self._pack(weight, plain_w)

        try:
            self._make(lambda pd: self._describe(pd, any_w, bias_md, attr), pack)
        finally:
            capi.destroy("dnnl_primitive_attr_destroy", [attr])
        self._bind(bias_md)

    def _make(self, describe, then=None) -> None:
        """The primitive of the descriptor `describe(pd)` fills: its implementation
        the one `onednn_choice` picks (never oneDNN's reference code), `then(pd)`
        run, the primitive created (its machine code generated, once); the
        descriptor freed in every case."""
        pd = Handle()
        try:
            self.implementation = onednn_choice.choose(pd, describe)
            if self.implementation.startswith("ref"):  # oneDNN's slow fallback
                raise NoFastKernel(self.implementation)
            if then is not None:
                then(pd)
            self.primitive = Handle()
            capi.call("dnnl_primitive_create", ctypes.byref(self.primitive), pd)
        finally:
            capi.destroy("dnnl_primitive_desc_destroy", [pd])

    def _attributes(self, act, add_md):
        """The post-ops: [the add of `other`,] then the activation."""
        attr, post_ops = Handle(), Handle()
        capi.call("dnnl_primitive_attr_create", ctypes.byref(attr))
        capi.call("dnnl_post_ops_create", ctypes.byref(post_ops))
        if add_md is not None:
            capi.call("dnnl_post_ops_append_binary", post_ops, capi.BINARY_ADD, add_md)
        eltwise = capi.eltwise(act)
        if eltwise:
            alg, alpha, beta = eltwise
            capi.call("dnnl_post_ops_append_eltwise", post_ops, alg,
                      ctypes.c_float(alpha), ctypes.c_float(beta))
        capi.call("dnnl_primitive_attr_set_post_ops", attr, post_ops)
        capi.destroy("dnnl_post_ops_destroy", [post_ops])  # the attr keeps a copy
        return attr

    def _pack(self, weight, plain_md) -> torch.Tensor:
        """The weight reordered into the primitive's layout: one reorder, now."""
        size = capi.library().lib.dnnl_memory_desc_get_size(self._packed_md)
        packed = torch.empty(size // 4 + 1)
        source = weight.detach().contiguous()
        capi.reorder(plain_md, source.data_ptr(), self._packed_md, packed.data_ptr())
        return packed

    def _bind(self, bias_md) -> None:
        """Memory objects for every argument; a call only sets their pointers."""
        self._src, self._dst = capi.memory(self._mds[0]), capi.memory(self._mds[1])
        self._bias = capi.memory(bias_md) if bias_md is not None else None
        self._other = capi.memory(self._mds[1]) if self.add else None
        self._arguments({
            capi.ARG_WEIGHTS: capi.memory(self._packed_md, self.packed.data_ptr()),
            capi.ARG_BIAS: self._bias, capi.ARG_POST_OP_0_SRC_1: self._other})

    def _arguments(self, more: dict) -> None:
        """The execute call's arguments: src, dst and `more` ({argument: memory},
        None where absent), every memory object freed with the primitive."""
        args = {capi.ARG_SRC: self._src, capi.ARG_DST: self._dst,
                **{arg: mem for arg, mem in more.items() if mem is not None}}
        self._mems = list(args.values())
        self._args = (ExecArg * len(args))(*(ExecArg(*a) for a in args.items()))
        # what a call hands `onednn_execute`'s one native call, as ints
        self._handles = (self.primitive.value, capi.library().stream.value,
                         len(args), ctypes.addressof(self._args), self._src.value,
                         self._dst.value,  # 0 for a bias or addend it has not
                         *(getattr(m, "value", 0) for m in (self._bias, self._other)))
        self._run = onednn_execute.runner()

    def __call__(self, x, bias=None, other=None) -> torch.Tensor:
        out = torch.empty_strided(self.out_shape, self.out_strides)  # empty(): 2x
        p, stream, nargs, args, src, dst, b, o = self._handles
        status = self._run(p, stream, nargs, args, src, x.data_ptr(), dst,
                           out.data_ptr(), b, bias.data_ptr() if b else 0,
                           o, other.data_ptr() if o else 0)
        if status != 0:
            raise capi.OneDNNError(f"oneDNN's {type(self).__name__} returned {status}")
        return out

    def __del__(self):
        try:
            capi.destroy("dnnl_primitive_destroy", [getattr(self, "primitive", None)])
            capi.destroy("dnnl_memory_destroy", getattr(self, "_mems", ()))
            capi.destroy("dnnl_memory_desc_destroy", getattr(self, "_mds", ()))
        except (AttributeError, TypeError):  # at exit, the modules are torn down
            pass  # first; the process's memory goes with it

    def __deepcopy__(self, memo):
        return None  # bound to its weight's copy by address: a copy makes its own

    def __reduce__(self):
        return _dropped, ()


class ConvPrimitive(Primitive):
    """act(conv2d(x, W, b) [+ other]) on a batch of images, any strides (ch. 7)."""

    def __init__(self, x, weight, bias, stride, padding, dilation, groups, act,
                 add: bool = False):
        self.conv = (list(stride), list(padding), list(dilation), groups)
        super().__init__(x, weight, bias, act, add)

    @staticmethod
    def takes(x) -> bool:
        """Channels-last images (`convert_layout`'s regions): on NCHW this oneDNN
        picks an im2col GEMM, or its reference code with a residual add, where
        torch's op reorders to a blocked layout and back around a direct kernel."""
        return x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last)

    def _output(self, x, weight):
        """The output's shape, and its layout: channels-last where the input is."""
        stride, padding, dilation, _ = self.conv
        last = x.is_contiguous(memory_format=torch.channels_last) and \
            not x.is_contiguous()
        return _out_shape(x.shape, weight.shape, stride, padding, dilation), \
            torch.channels_last if last else torch.contiguous_format

    def _shapes(self, x, weight):
        groups = self.conv[3]
        w_shape = list(weight.shape) if groups == 1 else \
            [groups, weight.shape[0] // groups, *weight.shape[1:]]
        return (x.shape, x.stride()), (self.out_shape, self.out_strides), w_shape

    def _describe(self, pd, weight_md, bias_md, attr):
        stride, padding, dilation, _ = self.conv
        capi.call("dnnl_convolution_forward_primitive_desc_create", ctypes.byref(pd),
                  capi.library().engine, capi.FORWARD_INFERENCE,
                  capi.CONVOLUTION_DIRECT, self._mds[0], weight_md, bias_md,
                  self._mds[1], capi.Dims(*stride),
                  capi.Dims(*(d - 1 for d in dilation)), capi.Dims(*padding),
                  capi.Dims(*padding), attr)


class LinearPrimitive(Primitive):
    """act(x @ W.T + b) on a contiguous (..., in) input: oneDNN's inner product over
    its rows (ch. 7)."""

    @staticmethod
    def takes(x) -> bool:
        return x.dim() >= 2 and x.is_contiguous()

    def _output(self, x, weight):
        return (*x.shape[:-1], weight.shape[0]), torch.contiguous_format

    def _shapes(self, x, weight):
        rows, (n, k) = x.numel() // x.shape[-1], weight.shape
        return ([rows, k], [k, 1]), ([rows, n], [n, 1]), [n, k]

    def _describe(self, pd, weight_md, bias_md, attr):
        capi.call("dnnl_inner_product_forward_primitive_desc_create",
                  ctypes.byref(pd), capi.library().engine, capi.FORWARD_INFERENCE,
                  self._mds[0], weight_md, bias_md, self._mds[1], attr)


def plan_call(module, through_torch):
    """The plan's call for a conv or linear pattern `module`: a `Primitive`, kept
    on the module as `_primitive` for the last input layout and weight; a new one
    where they changed, torch's op (`through_torch`) where oneDNN cannot take the
    tensors by address. One kernel either way (ch. 7)."""
    module._primitive = None
    if isinstance(module, ConvReLU):
        kind, args = ConvPrimitive, (module.stride, module.padding, module.dilation,
                                     module.groups, module.act)
    else:
        kind, args = LinearPrimitive, (module.act,)
    add = isinstance(module, ConvAddReLU)

    def call(m, x, weight, bias, *other):
        p = m._primitive  # made for these tensors? (`version` spelled out: no frame)
        key = (x.shape, x.stride(), (counter(weight), weight.data_ptr()), threads())
        if p is None or weight is not p.weight or bias is not p.bias or key != p.key:
            if not (usable(x, weight, bias) and kind.takes(x)):
                return through_torch(m, x, weight, bias, *other)
            try:
                p = m._primitive = kind(x, weight, bias, *args, add=add)
            except NoFastKernel:
                p = m._primitive = Refused(key, weight, bias)
        if p.refused or other and other[0].stride() != p.out_strides:
            return through_torch(m, x, weight, bias, *other)  # or laid out otherwise
        return p(x, bias, *other)

    call.through_torch = through_torch  # what it replaces (peers.attribution)
    return call


threads = torch.get_num_threads  # what a primitive is made for, asked per call


class NoFastKernel(Exception):
    """oneDNN has only its reference code for this problem (chapter 7)."""


class Refused:
    """Tensors oneDNN has no fast kernel for: torch's op runs them (chapter 7)."""

    refused, out_strides = True, None

    def __init__(self, key, weight=None, bias=None):
        self.key, self.weight, self.bias = key, weight, bias  # as a primitive's

    def __deepcopy__(self, memo):
        return None

    def __reduce__(self):
        return _dropped, ()


def _dropped():
    return None

