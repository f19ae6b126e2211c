"""`mmdsynth audit --mechanism person-release` (issue 48): the release of a table whose privacy unit is a person,
attacked with a canary person of 500 rows. Honest: within the claim. The person reduction broken (every row
weighing 1, the row-level sum): the canary moves the release hundreds of sensitivities and the audit fails."""
import numpy as np

from mmdsynth import audit as audit_module
from mmdsynth.audit import CANARY_ROWS, audit
from mmdsynth.engines import persons


def test_the_person_release_audit_passes_an_honest_release():
    r = audit(1.0, 1e-5, mechanism="person-release", trials=300, n_records=20)
    assert r.passed and r.epsilon_lower <= 1.0
    assert 0.5 < r.canary_gap <= 1.0 + audit_module.GAP_TOLERANCE
    assert "500 rows" in r.description and r.mechanism == "person-release"


def test_the_person_release_audit_catches_rows_weighed_as_persons(monkeypatch):
    monkeypatch.setattr(persons, "person_weights", lambda codes, m: np.ones(len(codes)))
    r = audit(1.0, 1e-5, mechanism="person-release", trials=100, n_records=20)
    assert not r.passed
    assert r.canary_gap > 0.3 * CANARY_ROWS and r.epsilon_lower > 1.0
