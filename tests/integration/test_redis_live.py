#!/usr/bin/env python3
"""
int-redis_live: tests/unit/ddb/test-ddb-live.c (the hps_ddb / hps_rcluster
library against a real cluster: exact round trips, slot migration with ASK
then MOVED, concurrent overflow under every policy, wrong password) on a
three-master Redis Cluster (requirepass) started and removed here.  The C
program prints TAP (cmocka); this script passes it through.  Skips (TAP
"1..0 # SKIP") without redis-server, redis-cli or the program.
"""
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hpstest as H  # noqa: E402
import test_redis_cluster as R  # noqa: E402


def main():
    prog = os.environ.get("HPS_DDB_LIVE", "")
    if not R.have_redis() or not os.access(prog, os.X_OK):
        H.Tap.skip_all("redis-server, redis-cli or test-ddb-live missing")
    tmp = tempfile.mkdtemp(prefix="hps-int-redis-live-")
    rc = None
    try:
        rc = R.RedisCluster(tmp, n=3, replicas=0)
        env = dict(os.environ, HPS_REDIS_ADDR="127.0.0.1:%d" % rc.ports[0],
                   HPS_REDIS_PASSWORD=R.PASSWORD, CMOCKA_MESSAGE_OUTPUT="TAP")
        r = subprocess.run([prog], env=env, timeout=240)
        return r.returncode
    except Exception as e:  # noqa: BLE001
        print("not ok 1 - cluster setup: %s: %s" % (type(e).__name__, e))
        print("1..1")
        return 1
    finally:
        if rc:
            rc.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
