"""A CNN cut into named stages, so that every method taps the feature maps it needs by name (DCML and
MetricFormer the last map, SAM a configurable stage, AVSL three levels). Each architecture only says how it
cuts itself into blocks; running, tapping, stopping early and resuming from a stage are written once here.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping, Sequence

import torch
from torch import Tensor, nn

from bgbias.errors import OptionError
from bgbias.models.input_convention import InputConvention
from bgbias.models.precision import network_autocast

BATCHNORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.SyncBatchNorm)


class Backbone(nn.Module):
    """Named stages run in order. The state-dict keys, ``blocks.<stage>.<the block's own keys>``, go into
    checkpoints, so an architecture must keep its cut stable."""

    def __init__(
        self,
        blocks: Iterable[tuple[str, nn.Module]],
        *,
        channels: Mapping[str, int],
        levels: tuple[str, str, str],
        convention: InputConvention,
        freeze_batchnorm: bool = True,
    ):
        super().__init__()
        self.blocks = nn.ModuleDict(blocks)
        self.stages: tuple[str, ...] = tuple(self.blocks.keys())
        if not self.stages:
            raise ValueError("a backbone needs at least one stage")
        if set(channels) != set(self.stages):
            raise ValueError(f"channels must name exactly the stages {self.stages}, got {sorted(channels)}")
        positions = [self.stages.index(level) if level in self.stages else -1 for level in levels]
        if len(levels) != 3 or -1 in positions or positions != sorted(set(positions)):
            raise ValueError(f"levels must be three distinct stages in order, got {levels}")
        self.channels: dict[str, int] = {stage: int(channels[stage]) for stage in self.stages}
        self.levels = levels
        self.convention = convention
        self.memory_format = torch.contiguous_format
        self.compiled: dict[str, nn.Module] = {}
        """A plain dict, so state dicts and weight digests stay those of the blocks themselves."""
        self._freeze_batchnorm = freeze_batchnorm
        self.train(self.training)

    @property
    def final(self) -> str:
        return self.stages[-1]

    @property
    def freeze_batchnorm(self) -> bool:
        """Whether BatchNorm layers stay in eval mode even in training mode (affine parameters train)."""
        return self._freeze_batchnorm

    @freeze_batchnorm.setter
    def freeze_batchnorm(self, frozen: bool) -> None:
        self._freeze_batchnorm = frozen
        self.train(self.training)

    def train(self, mode: bool = True) -> Backbone:
        super().train(mode)
        if self._freeze_batchnorm:
            for module in self.modules():
                if isinstance(module, BATCHNORMS):
                    module.eval()
        return self

    def forward(self, images: Tensor, taps: Sequence[str] | None = None) -> dict[str, Tensor]:
        """``{stage: output}`` of the requested taps (default: the final stage) for float RGB ``images`` in
        [0, 1], normalised with the convention; stages after the last tap do not run."""
        wanted = self._select(taps, first=0)
        normalised = self.convention.apply(images).contiguous(memory_format=self.memory_format)
        return self._run(normalised, 0, wanted)

    def forward_from(
        self, stage: str, features: Tensor, taps: Sequence[str] | None = None
    ) -> dict[str, Tensor]:
        """Continue from ``features`` as the output of ``stage`` (which may itself be requested)."""
        start = self._index(stage)
        wanted = self._select(taps, first=start)
        outputs = {stage: features} if start in wanted else {}
        outputs.update(self._run(features, start + 1, wanted - {start}))
        return outputs

    def feature_shape(self, input_size: int, stage: str | None = None) -> tuple[int, int, int]:
        """(C, H, W) of ``stage`` (default: the final one) for square ``input_size``-px images, measured."""
        stage = stage or self.final
        parameter = next(self.parameters(), None)
        blank = torch.zeros(1, 3, input_size, input_size,
                            device=parameter.device if parameter is not None else None)
        was_training = self.training
        self.eval()
        try:
            with torch.no_grad():
                shape = self.forward(blank, (stage,))[stage].shape
        finally:
            self.train(was_training)
        return int(shape[1]), int(shape[2]), int(shape[3])

    def compile_stages(self, enabled: bool) -> None:
        """Run every stage through ``torch.compile`` (a graph each, so taps still work), or eagerly again.
        Where the compiler fails, the backbone warns once and runs eagerly: a run never fails for it."""
        self.compiled = {name: torch.compile(block) for name, block in self.blocks.items()} if enabled else {}

    def _run(self, x: Tensor, start: int, wanted: set[int]) -> dict[str, Tensor]:
        outputs: dict[str, Tensor] = {}
        if not wanted:
            return outputs
        last, given = max(wanted), x.dtype
        with network_autocast(x.device.type):  # the stages in the run's precision, outputs in the input's
            for index in range(start, last + 1):
                name = self.stages[index]
                x = self._stage(name, x)
                if index in wanted:
                    outputs[name] = x
        return {name: output.to(given) for name, output in outputs.items()}

    def _stage(self, name: str, x: Tensor) -> Tensor:
        compiled = self.compiled.get(name)
        if compiled is None:
            return self.blocks[name](x)
        try:
            return compiled(x)
        except torch._dynamo.exc.TorchDynamoException as error:  # the compiler's failure, not the model's
            warnings.warn(f"torch.compile failed on backbone stage {name!r} ({type(error).__name__}: "
                          f"{str(error).strip().splitlines()[0] if str(error).strip() else ''}); running "
                          "eagerly instead (model.compile=false avoids the attempt)", stacklevel=2)
            self.compiled = {}
            return self.blocks[name](x)

    def _select(self, taps: Sequence[str] | str | None, *, first: int) -> set[int]:
        if taps is None:
            taps = (self.final,)
        elif isinstance(taps, str):
            taps = (taps,)
        if not taps:
            raise OptionError("no backbone stage requested", fix=f"ask for some of: {', '.join(self.stages)}")
        wanted = {self._index(tap) for tap in taps}
        if min(wanted) < first:
            early = self.stages[min(wanted)]
            raise OptionError(
                f"stage {early!r} comes before {self.stages[first]!r}, where this pass starts",
                fix=f"ask for some of: {', '.join(self.stages[first:])}",
            )
        return wanted

    def _index(self, stage: str) -> int:
        if stage not in self.blocks:
            choices = ", ".join(self.stages)
            raise OptionError(f"unknown backbone stage {stage!r}", fix=f"choose from: {choices}")
        return self.stages.index(stage)

    def extra_repr(self) -> str:
        return f"convention={self.convention}, freeze_batchnorm={self._freeze_batchnorm}"
