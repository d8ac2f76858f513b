"""api/policy.py: Enforcer looks for its files once per process (each search of the
configuration directories cost every check, a create's three among them), and still
re-reads a policy file it found when that file changes."""
from __future__ import annotations

import os

from gpu_tenancy.api.policy import make_enforcer

MEMBER = {"roles": ["member"], "project_id": "p1"}


def counting(enforcer) -> list[str]:
    looked: list[str] = []
    find = enforcer.conf.find_file

    def find_file(name):
        looked.append(name)
        return find(name)
    enforcer.conf.find_file = find_file
    return looked


def test_no_policy_file_is_looked_for_once_not_on_every_check():
    enforcer = make_enforcer(None)
    looked = counting(enforcer)
    for _ in range(5):
        assert enforcer.enforce("lease:create", {"project_id": "p1"}, MEMBER)
        assert not enforcer.enforce("lease:create", {"project_id": "p2"}, MEMBER)
    assert sorted(set(looked)) == sorted(looked), looked   # each name searched for once
    assert looked, "the files were looked for"


def test_a_policy_file_found_is_read_again_when_it_changes(tmp_path):
    path = tmp_path / "policy.yaml"
    path.write_text('"lease:create": "!"\n')
    enforcer = make_enforcer(str(path))
    assert not enforcer.enforce("lease:create", {"project_id": "p1"}, MEMBER)
    path.write_text('"lease:create": "role:member"\n')
    later = os.stat(path).st_mtime + 10
    os.utime(path, (later, later))
    assert enforcer.enforce("lease:create", {"project_id": "p2"}, MEMBER)
