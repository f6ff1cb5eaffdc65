"""The curated public API: a sorted `__all__` that names only what exists."""

from __future__ import annotations

import jobledger
import jobledger.testing

CONTRACT = {
    # DESIGN.md §2 names these; removing one is a breaking change.
    "AfterStartup",
    "AllMissed",  # DESIGN.md §8.11
    "AttemptSnapshot",
    "AuditEntry",
    "CancelManyResult",
    "CancelToken",
    "Clock",
    "Cron",
    "DrainVerdict",
    "Interval",
    "JobCancelled",
    "JobContext",
    "JobError",
    "JobErrorInfo",
    "JobHandle",
    "JobHandler",
    "JobManager",
    "JobSnapshot",
    "JobSpec",
    "JobStatus",
    "JobType",
    "LogLine",
    "MissedEvent",
    "Once",
    "PermanentError",
    "RetryPolicy",
    "SchedulerService",
    "ScheduleSnapshot",
    "SettledEvent",
    "SkipMissed",
    "SystemClock",
}


def test_all_is_sorted_and_complete() -> None:
    names = list(jobledger.__all__)
    assert names == sorted(names)
    assert len(names) == len(set(names))
    for name in names:
        assert hasattr(jobledger, name), name
    missing = CONTRACT - set(names)
    assert not missing, missing


def test_public_names_do_not_leak_private_modules() -> None:
    for name in jobledger.__all__:
        obj = getattr(jobledger, name)
        module = getattr(obj, "__module__", "jobledger")
        # Type aliases (`Trigger`, `CatchUpPolicy`) are unions; they carry no module.
        assert module.startswith("jobledger") or module == "types", (name, module)
    assert "FakeClock" in jobledger.testing.__all__


def test_status_compares_equal_to_its_string() -> None:
    completed: str = jobledger.JobStatus.COMPLETED
    assert completed == "completed"
    assert jobledger.JobStatus("failed").is_terminal


TESTING_CONTRACT = ["FakeClock", "assert_enqueued", "drain"]


def test_testing_exports_its_helpers_and_nothing_else() -> None:
    # What its implementation imports (JobManager, JobSnapshot, to_ms, TypeAdapter, ...)
    # must not be importable from here: a test that did so would pin an internal.
    public = sorted(name for name in vars(jobledger.testing) if not name.startswith("_"))
    assert public == list(jobledger.testing.__all__) == TESTING_CONTRACT
    for name in public:
        assert getattr(jobledger.testing, name).__module__.startswith("jobledger."), name


def test_the_package_exports_its_all_and_its_public_modules_only() -> None:
    extra = {name for name in vars(jobledger) if not name.startswith("_")} - set(jobledger.__all__)
    # Public subpackages appear once some code imported them (`contrib`: integrations).
    assert extra <= {"clock", "errors", "testing", "cli", "contrib"}, extra


def test_contrib_django_exports_the_backend_and_nothing_else() -> None:
    # Importing it must not need configured settings: Django imports a backend's module
    # from TASKS while it sets itself up.
    import jobledger.contrib.django as integration

    public = sorted(name for name in vars(integration) if not name.startswith("_"))
    assert public == list(integration.__all__) == ["JobledgerBackend", "TaskRaised"]
