"""The passes that rewrite a method's checked steps at load, in order, and which ones each form runs.

A pass takes a :class:`Stage` (the steps, their effects and the values they run on) and returns the next
one; none changes its argument, so every form starts from the same folded stage. The forms:

* every form first runs ``FOLDS``: copies of constants become views computed now, copies of activations
  views made in their place (fold.py);
* **own code**, the method's generated function (codegen/generate.py): buffers updated in place where the
  method copied an update back into them (in_place.py), every chain found fused into one call (fuse/, unless
  ``fuse=False``), then either start positions read to the host kept on the device
  (fuse/positions.py, on CUDA or wherever ``device_positions=True``) or, elsewhere and unless
  ``fuse=False``, repeated reads made once (repeats.py);
* **functional**, the pure function for ``torch.compile`` (``compile=True``, codegen/functional.py): only
  the chains whose fused kernel has a functional form (torch.compile fuses the others itself); host reads
  stay (torch.compile traces them);
* **traced**, with profiling on (ETDump): nothing more; every instruction runs as the file has it.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property

from pterun.executor.context import LoadContext
from pterun.executor.load.effects import MethodEffects
from pterun.executor.load.fold import PlannedViews, elide_view_copies, fold_constant_views, with_views
from pterun.executor.load.fuse import find_chains, fused, patterns
from pterun.executor.load.fuse.common import Chain
from pterun.executor.load.fuse.positions import keep_positions_on_device
from pterun.executor.load.in_place import update_in_place
from pterun.executor.load.repeats import share_repeated_reads
from pterun.executor.load.steps import Step
from pterun.format import Plan


class Form(enum.Enum):
    OWN_CODE = "own code"
    FUNCTIONAL = "functional"
    TRACED = "traced"


@dataclass(frozen=True)
class Load:
    """What every pass reads and none changes."""

    context: LoadContext
    plan: Plan
    original: MethodEffects  # the effects of the steps as built, before any pass
    params: Sequence[int]  # unplanned inputs: the caller's tensors, passed in on each call
    _chains: dict = field(default_factory=dict, compare=False)  # stage -> the chains found in it

    def chains(self, stage: Stage) -> tuple[list[Chain], MethodEffects]:
        """The chains of ``stage`` that can be fused, and the effects of its steps with them all fused (found once:
        two forms fuse from the same stage)."""
        found = self._chains.get(stage)
        if found is None:
            matchers = patterns(self.context.registries.kernels, self.context.run_device.type)
            found = self._chains[stage] = find_chains(self.plan, stage.steps, stage.objects, stage.effects,
                                                      self.views, matchers)
        return found

    @cached_property
    def views(self) -> PlannedViews:
        """The views the exporter planned, which every pass that turns copies into views or fuses asks about."""
        return PlannedViews(self.plan, self.original)


@dataclass(frozen=True, eq=False)
class Stage:
    """Where the passes stand: one step per instruction (None: folded away) and what they run on."""

    steps: list[Step]
    objects: list  # every value's object at load (copies folded into views included)
    constants: frozenset[int]  # values fixed at load: the file's constants and views of them
    computed: frozenset[int]  # values steps assign (results, moved values, views made in place)
    known: MethodEffects  # the effects of this stage's steps or an earlier stage's, which a pass rewrote a few of

    @cached_property
    def effects(self) -> MethodEffects:
        """What these steps write, read and bind."""
        return self.known.after(self.steps)


Pass = Callable[[Load, Stage], Stage]


def fold_constant_copies(load: Load, stage: Stage) -> Stage:
    steps, views = fold_constant_views(load.plan, stage.steps, stage.objects, stage.constants, stage.computed,
                                       stage.effects, load.views)
    return replace(stage, steps=steps, objects=with_views(load.plan, stage.objects, views),
                   constants=stage.constants | views.keys(), known=stage.effects)


def elide_activation_copies(load: Load, stage: Stage) -> Stage:
    steps, made = elide_view_copies(load.plan, stage.steps, stage.objects, stage.computed, set(load.params),
                                    stage.effects, load.views)
    return replace(stage, steps=steps, computed=stage.computed | made, known=stage.effects)


def fuse_every_chain(load: Load, stage: Stage) -> Stage:
    chains, effects = load.chains(stage)
    return replace(stage, steps=fused(stage.steps, chains), known=effects) if chains else stage


def fuse_functional_chains(load: Load, stage: Stage) -> Stage:
    found, effects = load.chains(stage)
    chains = [c for c in found if c.binding.functional is not None]
    return replace(stage, steps=fused(stage.steps, chains), known=effects) if chains else stage


def buffers_in_place(load: Load, stage: Stage) -> Stage:
    steps, made = update_in_place(load.plan, stage.steps, stage.effects)
    return replace(stage, steps=steps, computed=stage.computed | made, known=stage.effects) if made else stage


def share_reads(load: Load, stage: Stage) -> Stage:
    return replace(stage, steps=share_repeated_reads(load.plan, stage.steps, stage.effects), known=stage.effects)


def positions_on_device(load: Load, stage: Stage) -> Stage:
    kernels, device_type = load.context.registries.kernels, load.context.run_device.type
    return replace(stage, steps=keep_positions_on_device(load.plan, stage.steps, stage.effects, kernels, device_type),
                   known=stage.effects)


FOLDS: tuple[Pass, ...] = (fold_constant_copies, elide_activation_copies)


def passes(form: Form, context: LoadContext) -> tuple[Pass, ...]:
    """The passes ``form`` runs after ``FOLDS``, in order."""
    fuse = context.options.fuse
    if form is Form.OWN_CODE:
        if context.positions_on_device:  # which reads the position pass keeps on the device: it sees them all
            return (buffers_in_place,) + ((fuse_every_chain,) if fuse else ()) + (positions_on_device,)
        return (buffers_in_place,) + ((fuse_every_chain, share_reads) if fuse else ())
    if form is Form.FUNCTIONAL:
        return (fuse_functional_chains,) if fuse else ()
    return ()


def run(chosen: Sequence[Pass], load: Load, stage: Stage) -> Stage:
    for each in chosen:
        stage = each(load, stage)
    return stage
