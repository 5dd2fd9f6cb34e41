"""Launch: what a registered job starts with — its workload's known-good policy, a launch trial's
arm, the capture (or not, after a crash), and whether its first window waits for it to settle."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

from gitmd.errors import InvalidArgumentError
from gitmd.jobs.launch import LaunchPlan, clock_env
from gitmd.jobs.launch_key import command_key, launch_key, owned, stated
from gitmd.jobs.registry import Job, Registration
from gitmd.levers.launch_env import LIVE_FLAG_LEVERS, LIVE_FLAGS_VAR, with_site
from gitmd.levers.registry import PolicyEnv
from gitmd.loop.cost import cpu_now
from gitmd.loop.deps import Deps
from gitmd.loop.observe import LATE_SHARE, Observe
from gitmd.loop.publish import Publisher
from gitmd.loop.state import LivePending, Phase
from gitmd.loop.targets import Targets
from gitmd.loop.trials import Trials
from gitmd.phases import Phases
from gitmd.store.library import Workload
from gitmd.store.library_document import check_env

log = logging.getLogger(__name__)


def allowed_env(env: dict[str, str], allowed: frozenset[str] | None) -> tuple[dict[str, str], list[str]]:
    """A stored policy's environment as the launch applies it: each variable checked again as an
    incoming policy is (check_env: nothing that runs code in the job, only the catalog's variables),
    and the names refused. The store may hold policies written before the allowlist existed."""
    kept: dict[str, str] = {}
    refused = []
    for k, v in env.items():
        try:
            check_env({k: v}, "policy env", allowed)
        except InvalidArgumentError:
            refused.append(k)
            continue
        kept[k] = v
    return kept, sorted(refused)


class Launch:
    def __init__(self, d: Deps, pub: Publisher, observe: Observe, targets: Targets, trials: Trials) -> None:
        self.d = d
        self.pub = pub
        self.observe = observe
        self.targets = targets
        self.trials = trials

    def register(
        self, reg: Registration, audit_row: dict[str, object] | None = None
    ) -> tuple[Job, LaunchPlan]:
        d = self.d
        ph = Phases()
        reg = dataclasses.replace(reg, gpus=self._gpus(reg.gpus))
        want_capture = reg.capture and d.capture is not None
        found: dict[str, Workload] = {}
        looked: dict[str, Workload | None] = {}  # one library lookup a key per registration
        sure: dict[str, bool] = {}  # whether the launch is surely a run of it (workload_at_launch)
        script: dict[str, Workload | None] = {}  # when not: the workload its script last ran as
        suspect = None
        if want_capture:
            key = owned(reg.uid, reg.launch_key or launch_key(list(reg.command), reg.cwd))
            w0, sure[key], script[key] = self.workload_at_launch(key, reg)
            looked[key] = w0
            suspect = d.crashes.find(w0.id if w0 else "", key)
            if suspect is not None:
                want_capture = False  # run plainly until one run ends clean (gitmd/store/crashes.py)
            if w0 is not None and not reg.contract.checks and sure[key]:
                # this user's contract for the workload, given once (`gitmctl library contract`):
                # numerics-changing levers may be tried on this run, its stdout metric compared
                given, _ = d.library.contract(w0.id, reg.uid)
                if given.checks:
                    reg = dataclasses.replace(reg, contract=given)

        def resolve(key: str) -> str:
            if key not in looked:
                looked[key], sure[key], script[key] = self.workload_at_launch(key, reg)
            w = looked[key]
            if w is not None:
                found["w"] = w
            return w.id if w else ""

        ph.mark("library looked up")
        job, plan = d.jobs.register(dataclasses.replace(reg, capture=want_capture), resolve, audit_row)
        ph.mark("registered")
        if "w" not in found and d.fleet_miss is not None:
            d.fleet_miss()  # a library miss: the fleet is asked in the background
        st = d.states.create(job.id)
        st.cpu_at_start = cpu_now(d)
        workload = found.get("w")
        surely = any(sure.values())
        if workload is not None:
            plan = self._known(job, reg, workload, plan, surely)
        elif plan.capture:
            plan = self._unseen_command(job, plan, script.get(job.launch_key))
        ph.mark("policy and trial arm")
        rest = self.observe.rests(job, plan, surely) if plan.capture and d.capture is not None else ""
        ph.mark("observation planned")
        if (
            (rest or (plan.capture and plan.trial and st.trial_id is not None))  # no window will open on it
            and st.live is None  # its live levers act on the processes the shim names
            and not reg.background  # a foreground job's co-tenant yield acts through its shim
            and job.launcher != (0, 0)  # no ring will show it alive (nor time it): its launcher must
            and not d.config.capture.shim_on_resting_runs
        ):
            # it goes without the shim, so CUPTI is not even loaded into it (loaded with every
            # activity off it still cost a launch/sync-bound CuPy program 14-30% of its GPU time;
            # H200 2026-12-04). gitmd's clock library takes the shim's place: it stamps each
            # process's CUDA start for the launcher, which reports the run's length from there
            # ("cuda_s", the shim's milestones); where no stamp comes back, the run is timed by its
            # launcher, exec to exit ("wall_s"). The runs it is compared with are timed alike.
            st.phase = Phase.TRIAL_RUN if not rest else Phase.OBSERVED
            job = d.jobs.untrace(job, st.phase.value)
            plan = dataclasses.replace(plan, env=clock_env(plan.env), capture=False)
            st.shimless = True
            if rest:
                st.resting, st.observed = f"{rest}; it runs without the shim", True
                log.info("job %s (%s): %s", job.id, job.name, st.resting)
            else:
                log.info("job %s (%s): a launch trial's run: it runs without the shim, timed from its "
                         "CUDA start by gitmd's clock library", job.id, job.name)  # fmt: skip
        if reg.gpus:
            # --gpus selects: the job sees those GPUs only, named by UUID (nvidia-smi's indices and
            # CUDA's enumeration order may differ; a UUID is the same GPU to both)
            visible = ",".join(g.uuid for g in d.gpus if g.index in reg.gpus)
            plan = dataclasses.replace(plan, env={**plan.env, "CUDA_VISIBLE_DEVICES": visible})
        if plan.capture and set(LIVE_FLAG_LEVERS) & set(d.config.experiments.live_levers):
            plan = dataclasses.replace(plan, env={**plan.env, LIVE_FLAGS_VAR: "1"})
        plan = dataclasses.replace(plan, env=with_site(plan.env))  # framework knobs: gitmd's sitecustomize
        if reg.capture and d.capture is None:
            plan = LaunchPlan(
                plan.env, (*plan.warnings, "the job runs untraced: capture is off in gitmd"), False
            )
        if suspect is not None:
            plan = dataclasses.replace(
                plan,
                warnings=(
                    *plan.warnings,
                    f"runs without gitmd's capture: run {suspect.job_id} of this program crashed under it "
                    f"({suspect.reason}); capture resumes once a run ends cleanly without it",
                ),
            )
        if plan.capture and d.capture is not None:
            st.captured = True
            d.capture.track(job.id, Path(job.runtime_dir))
            why, age = ("", 0.0) if rest else self.observe.settle_plan(job, plan)
            if rest:
                st.resting, st.observed = rest, True
                log.info("job %s (%s): %s", job.id, job.name, rest)
            elif why:
                st.settling, st.settle_age_s = True, age
                log.info("job %s (%s): %s; its first capture window waits until its processes are %.0f s old "
                         "(capture.settle_s%s)", job.id, job.name, why, st.settle_age_s,
                         "" if st.settle_age_s <= d.config.capture.settle_s
                         else f", later in its expected run: the observation ends by {LATE_SHARE:.0%} of its "
                         "shortest recent run")  # fmt: skip
        for w in plan.warnings:
            log.warning("job %s (%s): %s", job.id, job.name, w)
        ph.mark("plan made")
        ph.log_if_slow(log, f"job {job.id}: its registration")
        return job, plan

    def workload_at_launch(
        self, key: str, reg: Registration
    ) -> tuple[Workload | None, bool, Workload | None]:
        """The workload a launch is a run of, before any kernel has run; whether it surely is one
        (True whenever a workload is returned, and whenever the launcher named the key); and, when
        it is not, the workload the key read from its command last ran as (for the plan's note).

        A sure launch gets the workload's policy and its user's consent, and its runs may go
        without the shim (a resting run, a launch trial's arm). Such runs are never fingerprinted,
        so another program would pass for the workload unseen. A launch is sure when its exact
        command line in its directory last ran as the workload (a fingerprint linked it:
        launch_key.command_key), or when its key was stated: by the launcher (`--launch-key`: the
        user or scheduler says what makes runs the same job; a Slurm job name does not,
        launch_key.stated), or for the workload by an admin's import or the fleet. A key read from
        the command alone does not make a launch sure: one script runs other programs by its
        arguments (timm's benchmark.py --model X is six of the corpus's programs), and the key's
        last workload came with the next model's launch. A command line not seen before is
        observed, and its fingerprint decides."""
        w, resolves = self.d.library.at_launch(key, command_key(key, list(reg.command), reg.cwd))
        if resolves or stated(reg.launch_key):
            return w, True, None
        return None, False, w

    @staticmethod
    def _unseen_command(job: Job, plan: LaunchPlan, other: Workload | None) -> LaunchPlan:
        """A launch its key alone would once have taken for ``other``, a workload with a policy: say
        why the policy does not come with it (workload_at_launch), in the plan's warnings."""
        if other is None or other.active_policy_for(job.uid) is None:
            return plan
        why = (
            f"this command line has not run here as a known workload: it runs without workload "
            f"{other.id}'s policy until a run of it is fingerprinted (its script last ran as that "
            "workload with other arguments, and a script may run another program by them)"
        )
        return dataclasses.replace(plan, warnings=(*plan.warnings, why))

    def _gpus(self, gpus: tuple[int, ...]) -> tuple[int, ...]:
        """The job's GPUs by this host's index (nvidia-smi's), each once, in order; an index this host
        does not have is refused."""
        have = {g.index for g in self.d.gpus}
        missing = sorted(set(gpus) - have)
        if missing:
            span = f"{min(have)}..{max(have)}" if have else "none"
            raise InvalidArgumentError(
                f"no GPU {', '.join(map(str, missing))} on this host (it has {len(have)}: {span})"
            )
        return tuple(sorted(set(gpus)))

    def _known(
        self, job: Job, reg: Registration, workload: Workload, plan: LaunchPlan, surely: bool
    ) -> LaunchPlan:
        """A recurring job: its known-good policy comes with the launch, no experiment needed; or it
        is the next run of its workload's launch trial (only a launch ``surely`` of the workload:
        workload_at_launch)."""
        d = self.d
        st = d.states.of(job.id)
        policy = workload.active_policy_for(job.uid)
        kept, refused = allowed_env(policy.env if policy else {}, d.library.allowed_env)
        env = {**kept, **plan.env}  # gitmd's own variables win
        warnings = plan.warnings
        if refused:
            # stored before the allowlist, or written into the store by hand: never applied
            pid = policy.id if policy else 0
            why = f"policy {pid} sets {', '.join(refused)}, which no policy may set: not applied"
            log.warning("job %s (%s): %s", job.id, job.name, why)
            warnings = (*warnings, why)
        plan = dataclasses.replace(
            plan,
            env=env,
            warnings=warnings,
            workload_id=workload.id,
            policy_id=policy.id if policy else 0,
            policy_status=policy.status if policy else "",
        )
        st.policy_id = policy.id if policy else 0
        exploring = (
            reg.allow_exploration
            and plan.capture
            and d.config.experiments.enabled
            and not d.pause.on
            and surely
        )
        if exploring and policy is not None and policy.env and self.trials.unconfirmed(policy):
            # from the fleet: confirmed on this node's first runs by a launch trial of it (A without)
            t = d.launch_trials.plan_confirm(
                workload.id, PolicyEnv(policy.id, policy.env), f"fleet: {policy.evidence.get('node', '?')}"
            )
            if t is not None:
                log.info("workload %s: policy %d from the fleet (node %s) is confirmed on this node's "
                         "next runs (launch trial %d)", workload.id, policy.id,
                         policy.evidence.get("node", "?"), t.id)  # fmt: skip
        live = workload.live_policy_for(job.uid)
        if live is not None and plan.capture:
            items = [dict(x) for x in live.live]
            if exploring and self.trials.unconfirmed(live):
                # from the fleet: tried as a live trial on this run, its windows A and B (known.py)
                st.live = LivePending(live.id, items, 0, confirm=True)
            else:
                # applied (and kept) once the run's processes are seen: no experiment needed (known.py)
                st.live = LivePending(live.id, items, 0)
                cpus = self.targets.exec_cpus(job, reg.cpus, items)
                if cpus:
                    plan = dataclasses.replace(plan, cpus=cpus)
            if not policy:
                st.policy_id = live.id
                plan = dataclasses.replace(plan, policy_id=live.id, policy_status=live.status)
        if reg.allow_exploration and plan.capture and d.config.experiments.enabled and surely:
            plan = self.trials.arm(job, workload.id, plan)
            if plan.trial and st.live is not None and st.live.confirm:
                # a launch trial's arm is timed whole: a live trial of a fleet policy on it would change
                # the run under its arm; the policy is confirmed on a run that is no arm
                log.info("job %s (%s): live policy %d from the fleet is not tried on this run: it is an arm "
                         "of a launch trial", job.id, job.name, st.live.policy_id)  # fmt: skip
                if st.policy_id == st.live.policy_id:  # nothing of it runs: the arm is a plain run
                    st.policy_id = 0
                    plan = dataclasses.replace(plan, policy_id=0, policy_status="")
                st.live = None
            if self.pub.known(job.id) and not plan.trial:
                log.info(
                    "job %s (%s): launched with policy %d of workload %s; not explored "
                    "(experiments.explore_known = false)", job.id, job.name, st.policy_id, workload.id,
                )  # fmt: skip
        return plan
