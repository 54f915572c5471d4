#!/usr/bin/python3
"""Several mounts of one shared store (its index in PostgreSQL), each a
host of its own, as several hosts of a training job would mount it.

Run beside a private cluster (scripts/with-postgres.sh --meta). Three
daemons on this machine stand for three hosts (host=h1, h2, h3), whose
store is a local directory (SharedStoreTest) or, in NetfsSharedStoreTest,
a directory on the network-filesystem bed (netfs_bed.py): each host sees
it through an sshfs client of its own, which caches names and sizes as
another machine's client would (run that class with --tcp, PostgreSQL on
127.0.0.1):
  - the orbax flow: mount 1 creates step_1.orbax-checkpoint-tmp-N/, mounts
    2 and 3 write parameter directories (.zarray and chunk files) under it,
    mount 1 writes the metadata files, fsyncs and renames the directory to
    step_1; then every mount lists and reads every file, byte for byte;
  - names: a lookup that missed before another host created the name finds
    it afterwards; an unlink, a rename and a rmdir on one host are seen at
    once on the others;
  - close-to-open: a file rewritten and closed on one host reads with its
    new bytes when another host opens it afterwards, also when that host
    had read (and cached) the old ones; files another host wrote after
    this one opened their segment or data file read at once;
  - conflicts: two hosts creating one name with O_EXCL, many times over:
    exactly one wins each; rmdir of a directory another host is filling
    ends ENOTEMPTY, or removes it and the create then fails with ENOENT,
    never both; 3 hosts x 2 threads creating files in one directory at once
    get no error and every host lists them all;
  - a second mount with a host name that is mounted is refused, naming the
    holder;
  - peers: three hosts restore a sealed tree at once, each range read
    from the storage by the host that serves its file and fetched by the
    others from it; that host killed with -9 in the middle of the others'
    next restore, which read on, every byte right;
  - peers: every mount serves the others on an address of its own,
    published while it is mounted and shown by `ckptfs stat`; a connection
    that cannot prove the store's secret is refused and counted; peers=off
    serves nothing, and an address not of this machine fails the mount;
  - PostgreSQL restarted under three mounts: every mount reads what all
    wrote before, and creates files after;
  - a host killed with SIGKILL mid-save: the others go on, every file it
    closed before the kill reads back from every host, its host name mounts
    again at once, and fsck of the store, with nothing mounted, is clean;
  - torch.distributed with gloo on 127.0.0.1, one process per mount: each
    rank saves its shard (torch.save) into its own mount, rank 0 writes the
    metadata, and every rank loads the shards the others wrote through its
    own mount.
Needs CKPTFS_BIN.
"""

import errno
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckptfs_harness as harness  # noqa: E402
import ckptfs_testlib as lib  # noqa: E402
import netfs_bed  # noqa: E402

PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
HOSTS = ("h1", "h2", "h3")


def read_exactly(sock, n):
    got = b""
    while len(got) < n:
        more = sock.recv(n - len(got))
        if not more:
            raise EOFError("the peer closed after %d of %d bytes" % (len(got), n))
        got += more
    return got


def blob(seed, size):
    return hashlib.shake_256(seed.encode()).digest(size)


class SharedStoreTest(unittest.TestCase):
    def setUp(self):
        if not os.environ.get("CKPTFS_TEST_META"):
            self.fail("run through scripts/with-postgres.sh --meta")
        self.tmp = harness.make_tmpdir()
        self.stores = self.make_stores()  # host -> the store's path on that host
        self.store = self.stores[HOSTS[0]]
        self.mounts = []
        for h in HOSTS:
            m = harness.Mount(self.stores[h], os.path.join(self.tmp, "mnt_" + h), ["host=" + h])
            m.mount()
            self.mounts.append(m)

    def make_stores(self):
        store = os.path.join(self.tmp, "store")
        return {h: store for h in HOSTS}

    def tearDown(self):
        for m in self.mounts:
            if m.pid is not None:
                m.unmount()

    def unmount_all_and_fsck(self):
        for m in self.mounts:
            if m.pid is not None:
                m.unmount()
        r = subprocess.run([harness.ckptfs_bin(), "fsck", self.fsck_path()], capture_output=True,
                           text=True)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def fsck_path(self):
        """Where fsck reads the store at the end of a test."""
        return self.store

    def read_everywhere(self, files):
        for m in self.mounts:
            for name, data in files.items():
                self.assertEqual(lib.read_file(m.path(name)), data, "%s on %s" % (name, m.mnt))

    def test_orbax_flow_across_three_mounts(self):
        m1, m2, m3 = self.mounts
        tmp = "step_1.orbax-checkpoint-tmp-1700000000"
        os.mkdir(m1.path(tmp))
        files = {}
        for i, m in enumerate((m2, m3)):
            for p in range(6):
                param = "%s/params.layer_%d.w%d" % (tmp, p, i)
                os.mkdir(m.path(param))
                zarray = b'{"chunks":[64],"dtype":"<f4","shape":[256],"zarr_format":2}'
                lib.write_file(m.path(param, ".zarray"), zarray)
                files[param + "/.zarray"] = zarray
                for c in range(4):
                    data = blob("%s/%d" % (param, c), 256 + 1000 * c + 37 * p)
                    lib.write_file(m.path(param, str(c)), data)
                    files["%s/%d" % (param, c)] = data
        meta = b'{"tree": "params", "format": "ocdbt=false"}'
        lib.write_file(m1.path(tmp, "_METADATA"), meta, fsync=True)
        lib.write_file(m1.path(tmp, "_CHECKPOINT_METADATA"), b'{"step": 1}', fsync=True)
        files[tmp + "/_METADATA"] = meta
        files[tmp + "/_CHECKPOINT_METADATA"] = b'{"step": 1}'
        os.rename(m1.path(tmp), m1.path("step_1"))
        files = {n.replace(tmp, "step_1"): d for n, d in files.items()}
        for m in self.mounts:
            self.assertEqual(os.listdir(m.path()), ["step_1"], m.mnt)
            self.assertEqual(len(os.listdir(m.path("step_1"))), 2 + 12, m.mnt)
        self.read_everywhere(files)
        self.unmount_all_and_fsck()

    def test_names_seen_at_once(self):
        m1, m2, m3 = self.mounts
        # Misses first: a cached miss would hide what comes next.
        for m in (m2, m3):
            self.assertFalse(os.path.exists(m.path("step_2")))
            self.assertFalse(os.path.exists(m.path("step_2.tmp", "x")))
        os.mkdir(m1.path("step_2.tmp"))
        lib.write_file(m1.path("step_2.tmp", "x"), b"x-bytes")
        self.assertEqual(lib.read_file(m2.path("step_2.tmp", "x")), b"x-bytes")
        os.rename(m1.path("step_2.tmp"), m1.path("step_2"))
        for m in (m2, m3):
            self.assertFalse(os.path.exists(m.path("step_2.tmp")), m.mnt)
            self.assertEqual(lib.read_file(m.path("step_2", "x")), b"x-bytes", m.mnt)
            self.assertEqual(os.listdir(m.path("step_2")), ["x"])
        os.unlink(m3.path("step_2", "x"))
        for m in (m1, m2):
            self.assertFalse(os.path.exists(m.path("step_2", "x")), m.mnt)
            self.assertEqual(os.listdir(m.path("step_2")), [])
        os.rmdir(m2.path("step_2"))
        for m in (m1, m3):
            self.assertEqual(os.listdir(m.path()), [], m.mnt)
            with self.assertRaises(FileNotFoundError):
                os.stat(m.path("step_2"))
        # Attributes too.
        lib.write_file(m1.path("a"), b"1")
        self.assertEqual(os.stat(m2.path("a")).st_mode & 0o777, 0o644)
        os.chmod(m1.path("a"), 0o600)
        self.assertEqual(os.stat(m2.path("a")).st_mode & 0o777, 0o600)
        self.unmount_all_and_fsck()

    def test_a_mount_alone_caches_and_a_host_that_comes_sees_at_once(self):
        m1, m2, m3 = self.mounts
        os.makedirs(m1.path("d"))
        lib.write_file(m1.path("d/x"), b"x")
        m2.unmount()
        m3.unmount()

        def lookups(n):
            before = m1.stats()["fs"]["ops"]["lookups"]
            for _ in range(n):
                os.stat(m1.path("d/x"))
                self.assertFalse(os.path.exists(m1.path("d/new")))
            return m1.stats()["fs"]["ops"]["lookups"] - before

        def alone_lookups():
            """The lookups of 100 rounds once m1 found itself alone: its
            next read of the hosts (every second beside others) finds no
            other, and a loaded machine can delay a read past the grant
            (which ends that solo period), so a few tries are allowed."""
            time.sleep(2.0)
            seen = []
            for _ in range(5):
                seen.append(lookups(100))
                if seen[-1] < 20:
                    break
                time.sleep(1.0)
            return seen
        # Alone, the kernel keeps names, attributes and misses: 200 stats of
        # three names reach the daemon a few times (each time they run out).
        self.assertLess(min(alone_lookups()), 20)
        for round_ in range(3):
            # The miss of d/new and the entry of d/x are in m1's kernel when
            # h2 mounts, renames d/x and creates d/new: m1 sees both at once.
            self.assertFalse(os.path.exists(m1.path("d/new")))
            os.stat(m1.path("d/x"))
            m2.mount()
            os.rename(m2.path("d/x"), m2.path("d/y"))
            lib.write_file(m2.path("d/new"), b"new%d" % round_)
            self.assertFalse(os.path.exists(m1.path("d/x")), round_)
            self.assertEqual(lib.read_file(m1.path("d/new")), b"new%d" % round_)
            self.assertEqual(lib.read_file(m1.path("d/y")), b"x")
            os.unlink(m1.path("d/new"))
            os.rename(m1.path("d/y"), m1.path("d/x"))
            # Beside another host nothing is kept, until m1 reads d under a
            # grant (two reads of its attributes 100 ms apart find it quiet,
            # which a slow machine can reach within these 20 rounds).
            grants = m1.stats()["engine"]["read_grants"]
            n = lookups(20)
            if m1.stats()["engine"]["read_grants"] == grants:
                self.assertGreaterEqual(n, 40, round_)
            else:
                self.assertGreaterEqual(n, 2, round_)
            m2.unmount()
            time.sleep(2.0)
        m2.mount()
        m3.mount()
        self.unmount_all_and_fsck()

    def test_a_host_keeps_what_it_made_until_another_host_changes_it(self):
        m1, m2, _ = self.mounts  # m3 stays mounted: nobody is alone
        os.makedirs(m1.path("own/d"))
        lib.write_file(m1.path("own/d/f"), b"f")
        lib.write_file(m1.path("own/d/g"), b"g")

        def daemon_calls(n):
            """Requests and index round trips of n stats of a name and of its
            directory and n misses, from the directory (a walk from the
            mount's root asks for the root's attributes, which change
            with every name any host adds there)."""
            before = m1.stats()
            d = os.open(m1.path("own/d"), os.O_PATH | os.O_DIRECTORY)
            try:
                for _ in range(n):
                    os.stat("g", dir_fd=d)
                    os.stat(".", dir_fd=d)
                    with self.assertRaises(FileNotFoundError):
                        os.stat("none", dir_fd=d)
            finally:
                os.close(d)
            after = m1.stats()
            return (after["fs"]["ops"]["lookups"] + after["fs"]["ops"]["getattrs"] -
                    before["fs"]["ops"]["lookups"] - before["fs"]["ops"]["getattrs"],
                    after["engine"]["index_round_trips"] - before["engine"]["index_round_trips"])

        # Beside other hosts, m1's kernel keeps the names and attributes of
        # what m1 made (a miss still reaches the daemon, which knows every
        # name of a directory it made): 300 calls, no round trip for them.
        requests, trips = daemon_calls(100)
        self.assertLess(requests, 150)
        self.assertLess(trips, 60)  # the stats' own, and the watch's polls
        # Another host changes them: m1 sees every change at once.
        os.rename(m2.path("own/d/f"), m2.path("own/d/f2"))
        lib.write_file(m2.path("own/d/new"), b"new")
        os.chmod(m2.path("own/d/g"), 0o600)
        self.assertFalse(os.path.exists(m1.path("own/d/f")))
        self.assertEqual(lib.read_file(m1.path("own/d/f2")), b"f")
        self.assertEqual(lib.read_file(m1.path("own/d/new")), b"new")
        self.assertEqual(os.stat(m1.path("own/d/g")).st_mode & 0o777, 0o600)
        self.assertEqual(os.stat(m1.path("own/d")).st_nlink, 2)
        os.mkdir(m2.path("own/d/sub"))
        self.assertEqual(os.stat(m1.path("own/d")).st_nlink, 3)
        s1, s2 = m1.stats()["engine"], m2.stats()["engine"]
        self.assertGreaterEqual(s1["owned_given_up"], 2, s1)  # own/d and own/d/g
        self.assertGreaterEqual(s2["owned_asked"], 2, s2)
        self.assertEqual(s2["owned_taken_over"], 0, s2)
        self.assertGreaterEqual(s1["owned_requests_heard"], 1, s1)  # PostgreSQL's NOTIFY
        # What m1 gave up is read from the index at every call from then on.
        self.assertGreaterEqual(daemon_calls(20)[0], 40)
        # And m1 changes it again as any host does.
        os.unlink(m1.path("own/d/new"))
        self.assertFalse(os.path.exists(m2.path("own/d/new")))
        self.unmount_all_and_fsck()

    def test_a_host_reads_a_quiet_directory_under_a_grant_until_another_changes_it(self):
        m1, m2, m3 = self.mounts
        os.mkdir(m1.path("q"))
        lib.write_file(m2.path("q/f"), b"f")  # m1 owns q no more
        lib.write_file(m1.path("q/g"), b"g")

        def daemon_calls(n):
            """Requests and index round trips of m3's n stats of q/g and of
            q, and n misses in q, each a walk from the mount's root."""
            before = m3.stats()
            for _ in range(n):
                os.stat(m3.path("q/g"))
                os.stat(m3.path("q"))
                self.assertFalse(os.path.exists(m3.path("q/none")))
            after = m3.stats()
            return (sum(after["fs"]["ops"].values()) - sum(before["fs"]["ops"].values()),
                    after["engine"]["index_round_trips"] - before["engine"]["index_round_trips"])

        # Nobody changes the root and q: m3 reads them under read grants,
        # its kernel keeps their attributes and the names it looked up, and
        # a miss there costs no round trip. What is left: g's attributes.
        for _ in range(3):
            daemon_calls(1)
            time.sleep(0.15)
        requests, trips = daemon_calls(100)
        self.assertLess(requests, 260)
        self.assertLess(trips, 160)  # the stats' own, and the watch's polls
        self.assertGreaterEqual(m3.stats()["engine"]["read_grants"], 2)
        # Another host's changes are seen by m3's next call.
        lib.write_file(m1.path("q/none"), b"new")
        self.assertEqual(lib.read_file(m3.path("q/none")), b"new")
        os.rename(m2.path("q/g"), m2.path("q/g2"))
        self.assertFalse(os.path.exists(m3.path("q/g")))
        self.assertEqual(lib.read_file(m3.path("q/g2")), b"g")
        os.chmod(m1.path("q"), 0o700)
        self.assertEqual(os.stat(m3.path("q")).st_mode & 0o777, 0o700)
        os.mkdir(m2.path("q/sub"))
        self.assertEqual(os.stat(m3.path("q")).st_nlink, 3)
        self.assertEqual(sorted(os.listdir(m3.path("q"))), ["f", "g2", "none", "sub"])
        lib.write_file(m1.path("r"), b"r")  # in the root
        self.assertEqual(lib.read_file(m3.path("r")), b"r")
        s3 = m3.stats()["engine"]
        self.assertGreaterEqual(s3["read_grants_given_up"], 2, s3)  # q and the root
        self.assertGreaterEqual(m1.stats()["engine"]["read_grants_asked"] +
                                m2.stats()["engine"]["read_grants_asked"], 2)
        self.unmount_all_and_fsck()

    def test_hosts_that_read_a_directory_change_it_at_once(self):
        m1, m2, _ = self.mounts
        os.mkdir(m1.path("q"))
        lib.write_file(m2.path("q/f"), b"f")  # m1 owns q no more
        # Both read q under read grants.
        for _ in range(3):
            for m in (m1, m2):
                os.stat(m.path("q"))
                self.assertFalse(os.path.exists(m.path("q/none")))
            time.sleep(0.15)
        for m in (m1, m2):
            self.assertGreaterEqual(m.stats()["engine"]["read_grants"], 1, m.mnt)
        taken = [m.stats()["engine"]["owned_taken_over"] for m in (m1, m2)]
        # Then both make names in it at once, each kernel holding q for its
        # create while it waits for the other to give q up: each gives its
        # own grant up first, so neither waits for the other to time out.
        errors = []

        def create(m, tag):
            try:
                for i in range(20):
                    lib.write_file(m.path("q/%s%d" % (tag, i)), tag.encode())
            except OSError as e:
                errors.append(e)
        threads = [threading.Thread(target=create, args=(m, tag)) for m, tag in ((m1, "a"), (m2, "b"))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])
        want = sorted(["f"] + ["a%d" % i for i in range(20)] + ["b%d" % i for i in range(20)])
        for m in (m1, m2):
            self.assertEqual(sorted(os.listdir(m.path("q"))), want, m.mnt)
            self.assertEqual(lib.read_file(m.path("q/a7")), b"a")
            self.assertEqual(lib.read_file(m.path("q/b7")), b"b")
        self.assertEqual([m.stats()["engine"]["owned_taken_over"] for m in (m1, m2)], taken)
        self.unmount_all_and_fsck()

    def test_open_o_creat_makes_and_opens_a_file_in_one_request(self):
        """On a shared mount, whose opens are all answered (close-to-open), an
        open(O_CREAT) of a new file is one CREATE request, not a MKNOD and an
        OPEN: the file has the mode asked less the umask, another host reads
        its bytes once it is closed, O_EXCL of its name is EEXIST there, and
        in a sealed tree it is EROFS on every host."""
        m1, m2, _ = self.mounts
        os.mkdir(m1.path("c"))
        kinds = ("creates", "mknods", "opens")
        first = m1.stats()["fs"]["ops"]
        before = m1.stats()["fs"]["ops"]
        own = {k: before.get(k, 0) - first.get(k, 0) for k in kinds}  # a read of the stats file
        old = os.umask(0o027)
        try:
            for i in range(10):
                fd = os.open(m1.path("c", "f%d" % i), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
                try:
                    os.write(fd, b"file %d" % i)
                finally:
                    os.close(fd)
        finally:
            os.umask(old)
        after = m1.stats()["fs"]["ops"]
        moved = {k: after.get(k, 0) - before.get(k, 0) - own[k] for k in kinds}
        self.assertEqual(moved, {"creates": 10, "mknods": 0, "opens": 0})
        for i in range(10):
            self.assertEqual(lib.read_file(m2.path("c", "f%d" % i)), b"file %d" % i)
            self.assertEqual(os.stat(m2.path("c", "f%d" % i)).st_mode & 0o777, 0o640)
        with self.assertRaises(FileExistsError):
            os.open(m2.path("c", "f0"), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        os.setxattr(m1.path("c"), "user.ckptfs.seal", b"1")
        for m in self.mounts:
            with self.assertRaises(OSError) as cm:
                os.open(m.path("c", "new"), os.O_CREAT | os.O_WRONLY, 0o644)
            self.assertEqual(cm.exception.errno, errno.EROFS, m.mnt)
        self.unmount_all_and_fsck()

    def test_a_tree_sealed_on_one_host_is_sealed_and_kept_on_every_host(self):
        m1, m2, m3 = self.mounts
        sealed = self.write_params(m2, "step_1", range(8))
        sealed.update(self.write_params(m3, "step_1", range(8, 16)))
        unsealed = self.write_params(m3, "step_2", range(16))
        os.setxattr(m1.path("step_1"), "user.ckptfs.seal", b"1")
        for m in self.mounts:
            self.assertEqual(os.getxattr(m.path("step_1", "param_3", "0"), "user.ckptfs.seal"), b"1")
            with self.assertRaises(OSError) as cm:
                lib.write_file(m.path("step_1", "param_3", "0"), b"x")
            self.assertEqual(cm.exception.errno, errno.EROFS, m.mnt)
            with self.assertRaises(OSError) as cm:
                lib.write_file(m.path("step_1", "trainer_state.json"), b"{}")
            self.assertEqual(cm.exception.errno, errno.EROFS, m.mnt)
            with self.assertRaises(OSError) as cm:
                os.chmod(m.path("step_1", "param_9"), 0o700)
            self.assertEqual(cm.exception.errno, errno.EROFS, m.mnt)
        lib.write_file(m2.path("step_2", "param_3", "0"), b"still writable")
        unsealed["step_2/param_3/0"] = b"still writable"

        def costs(before, after):
            ops = ("lookups", "getattrs")
            return (sum(after["fs"]["ops"][k] - before["fs"]["ops"][k] for k in ops),
                    after["engine"]["index_round_trips"] - before["engine"]["index_round_trips"])

        def restore(m, root, files):
            """LOOKUP and GETATTR requests and index round trips of reading
            `files` from the directory `root` (a walk from the mount's root
            would ask for the root's attributes), less those of reading
            the stats file."""
            before = m.stats()
            alone = costs(before, m.stats())
            before = m.stats()
            d = os.open(m.path(root), os.O_PATH | os.O_DIRECTORY)
            try:
                for name, data in files.items():
                    fd = os.open(os.path.relpath(name, root), os.O_RDONLY, dir_fd=d)
                    try:
                        self.assertEqual(os.read(fd, len(data) + 1), data, name)
                    finally:
                        os.close(fd)
            finally:
                os.close(d)
            got = costs(before, m.stats())
            return got[0] - alone[0], got[1] - alone[1]

        # Once read, a sealed tree is kept by every host's kernel and page
        # cache; the unsealed one is asked for at every open.
        for m in (m1, m2):
            restore(m, "step_1", sealed)
            restore(m, "step_2", unsealed)
            requests, trips = restore(m, "step_1", sealed)
            self.assertLess(requests, 3, m.mnt)
            self.assertLess(trips, 20, m.mnt)  # the watch's polls (4 a second)
            requests, trips = restore(m, "step_2", unsealed)
            self.assertGreater(requests, len(unsealed), m.mnt)
            self.assertGreater(trips, len(unsealed), m.mnt)
        # Removing it stays allowed; the other hosts see it gone at their
        # next lookup of its root, within the second their kernels keep its
        # name while they hold its snapshot.
        shutil.rmtree(m3.path("step_1"))
        removed = time.monotonic()
        for m in (m1, m2):
            while os.path.exists(m.path("step_1")) and time.monotonic() < removed + 3:
                time.sleep(0.05)
            self.assertFalse(os.path.exists(m.path("step_1")), m.mnt)
        self.unmount_all_and_fsck()

    def test_a_host_restores_a_sealed_tree_from_its_snapshot(self):
        """A host that mounts afresh reads a tree that two others wrote and
        one sealed: after the lookup of its root, no round trip to the
        index per file."""
        m1, m2, m3 = self.mounts
        files = self.write_params(m1, "step_1", range(12))
        files.update(self.write_params(m2, "step_1", range(12, 24)))
        os.setxattr(m1.path("step_1"), "user.ckptfs.seal", b"1")
        m3.remount()
        trips = lambda st: st["engine"]["index_round_trips"]  # noqa: E731
        before = m3.stats()
        alone = trips(m3.stats()) - trips(before)  # those of reading the stats
        before = m3.stats()
        self.assertEqual(before["engine"]["sealed_trees_held"], 0)
        t0 = time.monotonic()
        self.read_files(m3, files)
        seconds = time.monotonic() - t0
        after = m3.stats()
        self.assertEqual(after["engine"]["sealed_trees_held"], 1)
        self.assertEqual(after["engine"]["sealed_inodes_held"], 1 + 24 * 4)
        served = after["engine"]["snapshot_reads"] - before["engine"]["snapshot_reads"]
        self.assertGreater(served, 2 * len(files))
        asked = trips(after) - trips(before) - alone
        # The lookup of the root (its name, attributes and seal record, the
        # mount root's attributes), the root's name again each second, and
        # the hosts watch's polls (4 a second) while the files were read;
        # nothing per file.
        self.assertLessEqual(asked, 10 + 6 * (seconds + 1),
                             "%d round trips for %d files" % (asked, len(files)))
        # The sealing host holds the snapshot it wrote.
        self.assertEqual(m1.stats()["engine"]["sealed_trees_held"], 1)
        # verify and warmup read the tree as the snapshot has it.
        served = m3.stats()["engine"]["snapshot_reads"]
        for cmd in (["verify", "--json"], ["warmup", "--json"]):
            r = subprocess.run([harness.ckptfs_bin()] + cmd + [m3.path("step_1")],
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, " ".join(cmd) + ": " + r.stdout + r.stderr)
            out = json.loads(r.stdout)
            self.assertEqual(out["files"], len(files), out)
            self.assertEqual(out.get("damage", []), [], out)
        self.assertGreater(m3.stats()["engine"]["snapshot_reads"], served)
        self.assertEqual(m3.stats()["engine"]["sealed_trees_held"], 1)
        # A removal inside the tree ends this host's use of it.
        os.unlink(m3.path("step_1", "param_5", "1"))
        self.assertEqual(m3.stats()["engine"]["sealed_trees_held"], 0)
        del files["step_1/param_5/1"]
        self.read_files(m3, files)
        self.unmount_all_and_fsck()

    def test_steps_seal_themselves_on_every_host(self):
        """seal_marker and seal_renamed, with each host writing its part."""
        for m in self.mounts:
            m.remount(m.options + ["seal_marker=.metadata",
                                   "seal_renamed=*.orbax-checkpoint-tmp-*"])
        m1, m2, m3 = self.mounts

        def sealed(m, *parts):
            try:
                return os.getxattr(m.path(*parts), "user.ckptfs.seal") == b"1"
            except OSError as e:
                self.assertEqual(e.errno, errno.ENODATA)
                return False

        # torch.distributed.checkpoint: each rank writes its file from its
        # host, then the coordinator writes .metadata (here in place: every
        # open is answered on a shared store, so its close is seen).
        os.mkdir(m1.path("dcp_9"))
        files = {}
        for r, m in enumerate(self.mounts):
            name = "dcp_9/__%d_0.distcp" % r
            files[name] = blob(name, 40000 + r)
            lib.write_file(m.path(name), files[name], fsync=True)
        self.assertFalse(sealed(m2, "dcp_9"))
        lib.write_file(m1.path("dcp_9", ".metadata"), b"meta", fsync=True)
        deadline = time.monotonic() + 10  # RELEASE follows close(2)
        while not sealed(m2, "dcp_9") and time.monotonic() < deadline:
            time.sleep(0.02)
        # orbax: a temporary directory filled by every host, renamed by one.
        tmp = "step_9.orbax-checkpoint-tmp-1700000000"
        os.mkdir(m1.path(tmp))
        for i, m in enumerate(self.mounts):
            name = "%s/param_%d" % (tmp, i)
            os.mkdir(m.path(name))
            files[name + "/0"] = blob(name, 20000)
            lib.write_file(m.path(name, "0"), files[name + "/0"])
        os.rename(m1.path(tmp), m1.path("step_9"))
        files = {n.replace(tmp, "step_9"): d for n, d in files.items()}
        for m in self.mounts:
            for step in ("dcp_9", "step_9"):
                self.assertTrue(sealed(m, step), "%s on %s" % (step, m.mnt))
                with self.assertRaises(OSError) as cm:
                    lib.write_file(m.path(step, "extra"), b"x")
                self.assertEqual(cm.exception.errno, errno.EROFS, m.mnt)
        self.read_everywhere(files)
        self.unmount_all_and_fsck()

    def test_close_to_open(self):
        m1, m2, _ = self.mounts
        for size in (100, 70000, 3 << 20):
            name = "f%d" % size
            old, new = blob("old" + name, size), blob("new" + name, size + size // 3)
            lib.write_file(m1.path(name), old)
            self.assertEqual(lib.read_file(m2.path(name)), old)
            # m2 has the old bytes in its page cache now.
            with open(m1.path(name), "r+b") as f:
                f.write(new)
            self.assertEqual(lib.read_file(m2.path(name)), new, name)
            self.assertEqual(os.stat(m2.path(name)).st_size, len(new))
            # And back the other way, truncated.
            lib.write_file(m2.path(name), old[: size // 2])
            self.assertEqual(lib.read_file(m1.path(name)), old[: size // 2], name)
        self.unmount_all_and_fsck()

    def test_files_written_after_a_host_opened_their_files(self):
        """Another host's segment and data file stay open on the reading host,
        whose client of the shared filesystem may hold their old sizes."""
        m1, m2, _ = self.mounts
        first = self.write_params(m1, "ckpt", range(5))
        self.read_files(m2, first)  # m2 has m1's segment open now
        later = self.write_params(m1, "ckpt", range(5, 55))
        self.read_files(m2, later)  # at once, each of the 50
        big = "ckpt/rank_0.pt"
        data = blob(big, 6 << 20)
        lib.write_file(m1.path(big), data[: 4 << 20], fsync=True)
        self.assertEqual(lib.read_file(m2.path(big)), data[: 4 << 20])
        with open(m1.path(big), "r+b") as f:  # its data file grows
            f.seek(4 << 20)
            f.write(data[4 << 20:])
            f.flush()
            os.fsync(f.fileno())
        self.assertEqual(lib.read_file(m2.path(big)), data)
        self.unmount_all_and_fsck()

    def write_params(self, m, root, indices):
        files = {}
        for i in indices:
            d = "%s/param_%d" % (root, i)
            os.makedirs(m.path(d))
            for name, size in ((".zarray", 120), ("0", 16384), ("1", 16384)):
                files[d + "/" + name] = blob("%s/%s" % (d, name), size)
                lib.write_file(m.path(d, name), files[d + "/" + name])
        return files

    def read_files(self, m, files):
        for name, data in files.items():
            self.assertEqual(lib.read_file(m.path(name)), data, "%s on %s" % (name, m.mnt))

    def test_conflicts(self):
        self.check_o_excl_race()
        self.check_rmdir_against_a_filling_host()
        self.check_every_host_creating_in_one_directory()
        self.unmount_all_and_fsck()

    def check_o_excl_race(self):
        """Two hosts racing O_EXCL creates: one winner per name, seen by all."""
        m1, m2 = self.mounts[0], self.mounts[1]
        os.mkdir(m1.path("race"))
        wins = {}

        def excl(m, tag):
            for i in range(60):
                try:
                    fd = os.open(m.path("race", "n%d" % i), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
                except FileExistsError:
                    continue
                os.write(fd, tag.encode())
                os.close(fd)
                wins.setdefault(i, []).append(tag)

        threads = [threading.Thread(target=excl, args=(m, m.mnt)) for m in (m1, m2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(sorted(wins), list(range(60)))
        for i, who in wins.items():
            self.assertEqual(len(who), 1, "n%d created by %s" % (i, who))
            for m in self.mounts:
                self.assertEqual(lib.read_file(m.path("race", "n%d" % i)), who[0].encode())

    def check_rmdir_against_a_filling_host(self):
        """rmdir on one host against another filling the directory."""
        m1, m2, m3 = self.mounts
        outcomes = []
        for rnd in range(10):
            d = "fill_%d" % rnd
            os.mkdir(m1.path(d))
            created, errors = [], []

            def fill():
                # Odd rounds give the rmdir a head start.
                time.sleep(0.01 * (rnd % 2))
                for i in range(20):
                    try:
                        lib.write_file(m2.path(d, "f%d" % i), b"x")
                        created.append(i)
                    except FileNotFoundError:
                        errors.append(i)
                        return

            t = threading.Thread(target=fill)
            t.start()
            time.sleep(0.01 * ((rnd + 1) % 2))
            try:
                os.rmdir(m3.path(d))
                removed = True
            except OSError as e:
                self.assertEqual(e.errno, errno.ENOTEMPTY, e)
                removed = False
            t.join()
            if removed:
                self.assertEqual(created, [], "created in a removed directory")
                self.assertFalse(os.path.exists(m1.path(d)))
            else:
                self.assertGreater(len(created), 0)
                self.assertEqual(errors, [])
                self.assertEqual(sorted(os.listdir(m1.path(d))),
                                 sorted("f%d" % i for i in created))
            outcomes.append(removed)
        harness.log("rmdir against a filling host: %d removed, %d ENOTEMPTY" %
                    (outcomes.count(True), outcomes.count(False)))

    def check_every_host_creating_in_one_directory(self):
        """Two threads on each host creating in one directory at once."""
        m1 = self.mounts[0]
        os.mkdir(m1.path("hot"))
        failures = []

        def create_many(m, tag):
            try:
                for i in range(150):
                    lib.write_file(m.path("hot", "%s_%d" % (tag, i)), tag.encode())
            except OSError as e:
                failures.append(e)

        threads = [threading.Thread(target=create_many, args=(m, "%s_t%d" % (h, k)))
                   for m, h in zip(self.mounts, HOSTS) for k in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(failures, [])
        for m in self.mounts:
            self.assertEqual(len(os.listdir(m.path("hot"))), 6 * 150, m.mnt)

    def test_compaction_of_files_other_hosts_read_and_removed(self):
        m1, m2, m3 = self.mounts
        os.mkdir(m1.path("c"))
        files = {}
        for i in range(80):
            name = "c/f%d" % i
            files[name] = blob(name, 60000 + i)
            lib.write_file(m1.path(name), files[name])
        self.read_everywhere(files)  # every host has h1's segments open now
        for i in range(0, 80, 2):
            os.unlink(m2.path("c/f%d" % i))
            del files["c/f%d" % i]
        r = subprocess.run([harness.ckptfs_bin(), "compact", "--dead-ratio", "0.1", "--json",
                            m1.mnt], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        report = json.loads(r.stdout)
        self.assertGreater(report["segments_rewritten"], 0, report)
        self.assertGreater(report["bytes_reclaimed"], 0, report)
        # Hosts that read the old segments read the moved records.
        self.read_everywhere(files)
        for m in (m2, m3):
            self.assertEqual(sorted(os.listdir(m.path("c"))),
                             sorted(n.split("/")[1] for n in files))
        # Host h1 unmounts; more of its files go. `ckptfs stat` lists the
        # hosts, and `ckptfs compact STORE` compacts h1's segments as h1
        # while h2 and h3 stay mounted.
        for i in range(1, 80, 4):
            os.unlink(m3.path("c/f%d" % i))
            del files["c/f%d" % i]
        m1.unmount()
        r = subprocess.run([harness.ckptfs_bin(), "stat", "--json", m2.mnt], capture_output=True,
                           text=True)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        hosts = {h["name"]: h for h in json.loads(r.stdout)["hosts"]}
        self.assertEqual(sorted(hosts), list(HOSTS))
        self.assertEqual([n for n in HOSTS if hosts[n]["mounted"]], ["h2", "h3"])
        self.assertEqual(hosts["h2"]["pid"], m2.pid)
        r = subprocess.run([harness.ckptfs_bin(), "stat", m2.mnt], capture_output=True, text=True)
        self.assertIn("(mounted: h2, h3)", r.stdout)
        r = subprocess.run([harness.ckptfs_bin(), "compact", "--dead-ratio", "0.1", "--json",
                            self.store], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        report = json.loads(r.stdout)
        self.assertGreater(report["segments_rewritten"], 0, report)
        self.assertEqual({s >> 40 for s in report["segments"]}, {hosts["h1"]["id"]}, report)
        for m in (m2, m3):
            for name, data in files.items():
                self.assertEqual(lib.read_file(m.path(name)), data, "%s on %s" % (name, m.mnt))
        self.unmount_all_and_fsck()

    def test_tools_on_every_mount_and_on_the_store(self):
        files = {}
        os.mkdir(self.mounts[0].path("t"))
        for i, m in enumerate(self.mounts):
            for k in range(4):
                name = "t/h%d_%d" % (i + 1, k)
                files[name] = blob(name, 3000 + 150000 * k)
                lib.write_file(m.path(name), files[name])

        def run(*args):
            r = subprocess.run([harness.ckptfs_bin()] + list(args), capture_output=True,
                               text=True)
            self.assertEqual(r.returncode, 0, " ".join(args) + ": " + r.stdout + r.stderr)
            return r.stdout
        # Through each mount, on files every host wrote.
        for m in self.mounts:
            for name, data in files.items():
                j = json.loads(run("info", "--json", m.path(name)))[0]
                self.assertEqual(j["size"], len(data), name)
            v = json.loads(run("verify", "--json", m.path("t")))
            self.assertEqual(v["files"], len(files), v)
            run("warmup", m.path("t"))
        # On the store, with nothing mounted.
        self.unmount_all_and_fsck()
        j = json.loads(run("stat", "--json", self.store))
        self.assertEqual(j["namespace"]["files"], len(files))
        self.assertEqual(sorted(h["name"] for h in j["hosts"]), list(HOSTS))
        self.assertFalse(any(h["mounted"] for h in j["hosts"]), j["hosts"])
        report = json.loads(run("compact", "--json", self.store))
        self.assertFalse([k for k in report["kept"] if "is mounted" in k], report)
        for m in self.mounts:
            m.mount()
        self.read_everywhere(files)

    def test_each_host_serves_its_peers(self):
        addresses = [m.stats().get("peer_address", "") for m in self.mounts]
        self.assertEqual(len(set(addresses)), len(HOSTS), addresses)
        for a in addresses:
            host, _, port = a.rpartition(":")
            self.assertTrue(host and int(port) > 0, addresses)

        def published(m):
            j = json.loads(subprocess.run([harness.ckptfs_bin(), "stat", "--json", m.mnt],
                                          capture_output=True, text=True, check=True).stdout)
            return {h["name"]: h["peer"] for h in j["hosts"] if h["mounted"]}
        self.assertEqual(published(self.mounts[0]), dict(zip(HOSTS, addresses)))
        text = subprocess.run([harness.ckptfs_bin(), "stat", self.mounts[1].mnt],
                              capture_output=True, text=True, check=True).stdout
        self.assertIn("on " + addresses[1] + ";", text)

        # A stranger that cannot prove the store's secret gets nothing.
        refused = self.mounts[0].stats()["engine"]["peer_refused"]
        host, _, port = addresses[0].rpartition(":")
        with socket.create_connection((host, int(port)), timeout=10) as c:
            hello = read_exactly(c, 8 + 4 + 32)
            self.assertEqual(hello[:8], b"CKPTPEER")
            c.sendall(os.urandom(64))  # a nonce and a made-up MAC
            verdict = read_exactly(c, 4 + 32)
            self.assertEqual(int.from_bytes(verdict[:4], "little"), errno.EACCES)
            self.assertEqual(verdict[4:], bytes(32))
            c.sendall(b"\x15\x00segments/00000001.seg" + bytes(12))
            try:
                self.assertEqual(c.recv(1), b"")  # closed
            except ConnectionResetError:
                pass  # closed before it read the request: a reset
        self.assertEqual(self.mounts[0].stats()["engine"]["peer_refused"], refused + 1)
        self.assertEqual(self.mounts[0].stats()["engine"]["peer_requests"], 0)

        # A host gone takes its address with it.
        self.mounts[2].unmount()
        self.assertEqual(published(self.mounts[0]), dict(zip(HOSTS[:2], addresses[:2])))
        # peers=off serves nothing; an address not of this machine fails.
        off = harness.Mount(self.stores[HOSTS[2]], os.path.join(self.tmp, "mnt_off"),
                            ["host=h3", "peers=off"])
        off.mount()
        try:
            self.assertNotIn("peer_address", off.stats())
            # Mounted, with no address: the one it had went at its unmount.
            self.assertEqual(published(self.mounts[0]),
                             dict(zip(HOSTS, addresses[:2] + [""])))
        finally:
            off.unmount()
        bad = harness.Mount(self.stores[HOSTS[2]], os.path.join(self.tmp, "mnt_bad"),
                            ["host=h3", "peers=192.0.2.1"])  # TEST-NET-1
        with self.assertRaises(harness.HarnessError) as e:
            bad.mount()
        self.assertIn("peers", str(e.exception))
        self.mounts[2].mount()
        self.assertEqual(sorted(published(self.mounts[0])), list(HOSTS))

    def test_hosts_restore_a_sealed_tree_from_one_another(self):
        """Every host restores a sealed tree at once: each file of the
        store is read from the storage by the host that serves it, and the
        others fetch its ranges from that host. That host is killed with -9
        in the middle of the next restore of the others, which read on
        from the storage, every byte right."""
        m1, m2, m3 = self.mounts
        files = self.write_params(m1, "step_1", range(120))  # 4 MiB
        os.setxattr(m1.path("step_1"), "user.ckptfs.seal", b"1")

        def restore(mounts, after_some=None):
            errors, some = [], threading.Event()

            def run(m):
                try:
                    for k, (name, data) in enumerate(files.items()):
                        self.assertEqual(lib.read_file(m.path(name)), data, name)
                        if k == 10:
                            some.set()
                except Exception as e:  # noqa: BLE001
                    errors.append("%s: %r" % (m.mnt, e))
            threads = [threading.Thread(target=run, args=(m,)) for m in mounts]
            for t in threads:
                t.start()
            if after_some:
                some.wait(60)
                after_some()
            for t in threads:
                t.join()
            self.assertEqual(errors, [])

        def engine(m):
            return m.stats()["engine"]
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        before = [engine(m) for m in self.mounts]
        restore(self.mounts)
        after = [engine(m) for m in self.mounts]
        delta = [{k: a[k] - b[k] for k in a if k.startswith("peer_")}
                 for a, b in zip(after, before)]
        read = sum(d["peer_read_bytes"] for d in delta)
        self.assertGreater(read, 0, delta)
        self.assertEqual(read, sum(d["peer_bytes_served"] for d in delta), delta)
        self.assertEqual(sum(d["peer_failures"] + d["peer_rejected"] for d in delta), 0, delta)

        # The host that served the most goes in the middle of the others'
        # next restore, cold on each.
        owner = max(range(3), key=lambda i: delta[i]["peer_bytes_served"])
        others = [m for i, m in enumerate(self.mounts) if i != owner]
        for m in others:
            m.remount()
        victim = self.mounts[owner]

        def kill():
            pid = victim.pid
            os.kill(pid, signal.SIGKILL)
            self.assertTrue(harness.wait_pid_gone(pid, 30), "daemon survived SIGKILL")
        restore(others, after_some=kill)
        victim.pid = None
        self.assertTrue(harness.fuse_unmount(victim.mnt), "the dead mount would not go away")
        # What they asked it for after it went, they read from the storage.
        self.assertGreater(sum(engine(m)["peer_failures"] for m in others), 0)
        for m in others:
            self.assertEqual(engine(m)["peer_rejected"], 0)
        # Its host mounts again and serves again.
        victim.mount()
        self.assertTrue(victim.stats().get("peer_address"))
        self.read_files(victim, files)

    def test_hosts_keep_what_they_serve_in_a_cache_directory(self):
        """peer_cache_dir: the blocks a host serves are kept in an unnamed
        file in that directory, not in memory; a directory that cannot
        hold it fails the mount, naming the option."""
        dirs = []
        for k, m in enumerate(self.mounts):
            d = os.path.join(self.tmp, "peer_cache_%d" % k)
            os.mkdir(d)
            dirs.append(d)
            m.remount(m.options + ["peer_cache_dir=" + d])
        m1 = self.mounts[0]
        files = self.write_params(m1, "step_1", range(60))
        os.setxattr(m1.path("step_1"), "user.ckptfs.seal", b"1")
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        for m in self.mounts[1:]:
            self.read_files(m, files)
        stats = [m.stats() for m in self.mounts]
        kept = [s["engine"]["peer_cache_file_bytes"] for s in stats]
        self.assertGreater(sum(kept), 0, kept)
        self.assertEqual(sum(s["engine"]["peer_read_bytes"] for s in stats),
                         sum(s["engine"]["peer_bytes_served"] for s in stats))
        for s in stats:
            self.assertEqual(s["memory"]["held"]["peer_ranges"], 0, s["memory"])
        for d in dirs:
            self.assertEqual(os.listdir(d), [])
        text = subprocess.run([harness.ckptfs_bin(), "stat", self.mounts[kept.index(max(kept))].mnt],
                              capture_output=True, text=True, check=True).stdout
        self.assertIn("kept on disk", text)
        m3 = self.mounts[2]
        m3.unmount()
        bad = harness.Mount(self.stores[HOSTS[2]], os.path.join(self.tmp, "mnt_bad"),
                            ["host=h3", "peer_cache_dir=" + os.path.join(self.tmp, "missing")])
        with self.assertRaises(harness.HarnessError) as e:
            bad.mount()
        self.assertIn("peer_cache_dir", str(e.exception))
        m3.mount()
        self.read_files(m3, files)

    def test_host_name_taken(self):
        other = harness.Mount(self.store, os.path.join(self.tmp, "mnt_dup"), ["host=h2"])
        with self.assertRaises(harness.HarnessError) as e:
            other.mount()
        self.assertIn('host "h2"', str(e.exception))
        self.assertIn("pid %d" % self.mounts[1].pid, str(e.exception))

    def test_host_killed_mid_save(self):
        m1, m2, m3 = self.mounts
        os.mkdir(m1.path("save"))
        log_path = os.path.join(self.tmp, "writer.log")
        writer = subprocess.Popen([PY, "-c", textwrap.dedent(r"""
            import hashlib, os, sys
            mnt, log_path = sys.argv[1], sys.argv[2]
            log = open(log_path, "a", buffering=1)
            for i in range(100000):
                name = "save/w_%d" % i
                data = hashlib.shake_256(name.encode()).digest(1000 + (i * 7919) % 300000)
                with open(os.path.join(mnt, name), "wb") as f:
                    f.write(data)
                log.write(name + "\n")
            """), m3.mnt, log_path], stderr=subprocess.DEVNULL)
        # Meanwhile the other hosts save too.
        mine = {}
        deadline = time.monotonic() + 2.0
        i = 0
        while time.monotonic() < deadline:
            name = "save/m1_%d" % i
            mine[name] = blob(name, 5000 + i)
            lib.write_file(m1.path(name), mine[name])
            i += 1
        pid = m3.pid
        os.kill(pid, signal.SIGKILL)
        self.assertTrue(harness.wait_pid_gone(pid, 30), "daemon survived SIGKILL")
        writer.kill()
        writer.wait()
        m3.pid = None
        self.assertTrue(harness.fuse_unmount(m3.mnt), "the dead mount would not go away")
        with open(log_path) as f:
            closed = [line.strip() for line in f if line.strip()]
        self.assertGreater(len(closed), 0, "the writer closed no file before the kill")
        harness.log("killed host h3 after %d closed files" % len(closed))
        files = dict(mine)
        for name in closed:
            files[name] = hashlib.shake_256(name.encode()).digest(
                1000 + (int(name.split("_")[1]) * 7919) % 300000)
        # The others go on.
        for k in range(20):
            name = "save/after_%d" % k
            files[name] = blob(name, 777 * k)
            lib.write_file(m2.path(name), files[name])
        for m in (m1, m2):
            for name, data in files.items():
                self.assertEqual(lib.read_file(m.path(name)), data, "%s on %s" % (name, m.mnt))
        # The host name mounts again at once, and reads everything.
        m3.mount()
        self.read_everywhere(files)
        self.unmount_all_and_fsck()

    def test_server_restart_under_three_mounts(self):
        if not os.environ.get("CKPTFS_TEST_PG_SERVER"):
            self.fail("run through scripts/with-postgres.sh --meta")
        files = {}
        for k, m in enumerate(self.mounts):
            os.mkdir(m.path("d%d" % k))
            for i in range(20):
                name = "d%d/f%d" % (k, i)
                files[name] = blob(name, 3000 * i)
                lib.write_file(m.path(name), files[name], fsync=(i % 5 == 0))
        subprocess.run(os.environ["CKPTFS_TEST_PG_SERVER"].split() + ["restart"], check=True)
        # Every mount goes on: reads, and new files, on every host.
        self.read_everywhere(files)
        for k, m in enumerate(self.mounts):
            name = "d%d/after" % ((k + 1) % len(self.mounts))
            files[name] = blob(name, 5000)
            lib.write_file(m.path(name), files[name])
        self.read_everywhere(files)
        self.unmount_all_and_fsck()

    def test_torch_distributed_gloo(self):
        self.run_gloo_ranks()
        self.unmount_all_and_fsck()

    def test_a_gloo_job_seals_its_step_with_the_marker_option(self):
        for m in self.mounts:
            m.remount(m.options + ["seal_marker=.metadata"])
        self.run_gloo_ranks()
        # Rank 0 closed .metadata on its host: the step is sealed on every host.
        deadline = time.monotonic() + 10
        for m in self.mounts:
            p = m.path("dcp_step_5")
            while time.monotonic() < deadline:
                try:
                    if os.getxattr(p, "user.ckptfs.seal") == b"1":
                        break
                except OSError as e:
                    self.assertEqual(e.errno, errno.ENODATA)
                time.sleep(0.02)
            self.assertEqual(os.getxattr(p, "user.ckptfs.seal"), b"1", m.mnt)
            with self.assertRaises(OSError) as cm:
                lib.write_file(os.path.join(p, "train_state.pt"), b"x")
            self.assertEqual(cm.exception.errno, errno.EROFS, m.mnt)
        self.unmount_all_and_fsck()

    def run_gloo_ranks(self):
        """One gloo rank per host saves its shard into dcp_step_5, rank 0
        writes .metadata (as torch.distributed.checkpoint's coordinator
        does), and every rank loads every shard."""
        script = textwrap.dedent(r"""
            import os, sys, pickle, torch, torch.distributed as dist
            rank, world, mnt, port = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
            dist.init_process_group("gloo", init_method="tcp://127.0.0.1:" + port,
                                    rank=rank, world_size=world)
            def shard(r):
                g = torch.Generator().manual_seed(1000 + r)
                return {"w": torch.randn(256, 512, generator=g), "b": torch.randn(512, generator=g)}
            ckpt = os.path.join(mnt, "dcp_step_5")
            if rank == 0:
                os.makedirs(ckpt)
            dist.barrier()
            torch.save(shard(rank), os.path.join(ckpt, "__%d_0.distcp" % rank))
            dist.barrier()
            if rank == 0:
                meta = {"world": world, "files": ["__%d_0.distcp" % r for r in range(world)]}
                with open(os.path.join(ckpt, ".metadata"), "wb") as f:
                    pickle.dump(meta, f)
                    f.flush()
                    os.fsync(f.fileno())
            dist.barrier()
            with open(os.path.join(ckpt, ".metadata"), "rb") as f:
                meta = pickle.load(f)
            for r in range(world):
                got = torch.load(os.path.join(ckpt, meta["files"][r]))
                want = shard(r)
                assert all(torch.equal(got[k], want[k]) for k in want), (rank, r)
            dist.barrier()
            print("rank %d loaded %d shards" % (rank, world))
            """)
        port = str(29500 + os.getpid() % 1000)
        procs = [subprocess.Popen([PY, "-c", script, str(r), str(len(self.mounts)), m.mnt, port],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for r, m in enumerate(self.mounts)]
        for r, p in enumerate(procs):
            out, err = p.communicate(timeout=240)
            self.assertEqual(p.returncode, 0, "rank %d: %s%s" % (r, out, err[-3000:]))
            self.assertIn("rank %d loaded 3 shards" % r, out)


class NetfsSharedStoreTest(SharedStoreTest):
    """Every case above on the network-filesystem bed: the store on an
    export of a private sshd, each host's daemon reaching it through an
    sshfs client of its own."""

    def make_stores(self):
        why = netfs_bed.unavailable()
        if why:
            self.skipTest(why)
        self.bed = netfs_bed.Bed(self.tmp)
        return {h: os.path.join(self.bed.mount(h), "store") for h in HOSTS}

    def fsck_path(self):
        # On the export itself, as on the file server: a host's client may
        # list the segments as they were up to its cache time ago, before
        # the compactions at unmount.
        return os.path.join(self.bed.export, "store")

    def tearDown(self):
        SharedStoreTest.tearDown(self)
        self.bed.stop()


class EmbeddedStoreTest(unittest.TestCase):
    """The cases above that apply to one host, on one mount of an embedded
    store that stands for all three: the orbax flow, names and misses seen at
    once, close-to-open, and the conflicts (O_EXCL races, rmdir against a
    filling thread, creates in one directory from six threads)."""

    def setUp(self):
        self.tmp = harness.make_tmpdir()
        self.store = os.path.join(self.tmp, "store")
        meta = os.environ.pop("CKPTFS_TEST_META", None)  # an embedded store
        try:
            m = harness.Mount(self.store, os.path.join(self.tmp, "mnt"), [])
            m.mount()
        finally:
            if meta is not None:
                os.environ["CKPTFS_TEST_META"] = meta
        self.assertFalse(os.path.exists(os.path.join(self.store, "SHARED")))
        self.mounts = [m, m, m]

    tearDown = SharedStoreTest.tearDown
    unmount_all_and_fsck = SharedStoreTest.unmount_all_and_fsck
    fsck_path = SharedStoreTest.fsck_path
    read_everywhere = SharedStoreTest.read_everywhere
    test_orbax_flow_across_three_mounts = SharedStoreTest.test_orbax_flow_across_three_mounts
    test_names_seen_at_once = SharedStoreTest.test_names_seen_at_once
    test_close_to_open = SharedStoreTest.test_close_to_open
    test_files_written_after_a_host_opened_their_files = \
        SharedStoreTest.test_files_written_after_a_host_opened_their_files
    write_params = SharedStoreTest.write_params
    read_files = SharedStoreTest.read_files
    test_conflicts = SharedStoreTest.test_conflicts
    check_o_excl_race = SharedStoreTest.check_o_excl_race
    check_rmdir_against_a_filling_host = SharedStoreTest.check_rmdir_against_a_filling_host
    check_every_host_creating_in_one_directory = \
        SharedStoreTest.check_every_host_creating_in_one_directory


if __name__ == "__main__":
    harness.require_fuse()
    harness.set_deadline(400)
    unittest.main(verbosity=2)
