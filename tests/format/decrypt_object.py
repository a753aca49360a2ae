#!/usr/bin/python3
"""An independent reader of encrypted anneal objects.

Written from docs/STORE.md alone ("Objects" and "Encryption"), with no
anneal code: it proves the document says enough to decrypt a store. Python 3,
libsodium through ctypes, and the zstd command.

  decrypt_object.py check KEYFILE STORE   key check of KEYFILE against STORE/encryption
  decrypt_object.py read KEYFILE FILE     an object file's plaintext on stdout
  decrypt_object.py verify KEYFILE STORE  decrypts every object file and checks
                                          that its BLAKE2b-256 is its name; exit 1 if not
"""
import ctypes
import ctypes.util
import hashlib
import os
import subprocess
import sys

sodium = ctypes.CDLL(ctypes.util.find_library("sodium") or "libsodium.so.23")
if sodium.sodium_init() < 0:
    sys.exit("libsodium failed to initialize")
HEADERBYTES = sodium.crypto_secretstream_xchacha20poly1305_headerbytes()
ABYTES = sodium.crypto_secretstream_xchacha20poly1305_abytes()
STATEBYTES = sodium.crypto_secretstream_xchacha20poly1305_statebytes()
TAG_FINAL = sodium.crypto_secretstream_xchacha20poly1305_tag_final()
CHUNK = 65536


def read_key(path):
    return bytes.fromhex(open(path).read().strip())


def key_check(key):
    # BLAKE2b-256 keyed with the key over "anneal key check v1".
    return hashlib.blake2b(b"anneal key check v1", digest_size=32, key=key).digest()


def decrypt(key, data, object_id):
    if data[:4] != b"ANOB":
        raise ValueError("bad magic")
    if data[4] == 1:
        frame = data[16:]
    elif data[4] == 2:
        if data[16:24] != key_check(key)[:8]:
            raise ValueError("encrypted with key id %s" % data[16:24].hex())
        state = ctypes.create_string_buffer(STATEBYTES)
        if sodium.crypto_secretstream_xchacha20poly1305_init_pull(state, data[24:24 + HEADERBYTES], key) != 0:
            raise ValueError("bad stream header")
        ad = data[:24] + bytes.fromhex(object_id)
        pos, frame, first = 48, b"", True
        while True:
            message = data[pos:pos + CHUNK + ABYTES]
            out = ctypes.create_string_buffer(max(1, len(message) - ABYTES))
            out_len = ctypes.c_ulonglong()
            tag = ctypes.c_ubyte()
            a = ad if first else None
            if sodium.crypto_secretstream_xchacha20poly1305_pull(
                    state, out, ctypes.byref(out_len), ctypes.byref(tag), message,
                    ctypes.c_ulonglong(len(message)), a, ctypes.c_ulonglong(len(a) if a else 0)) != 0:
                raise ValueError("authentication failed")
            frame += out.raw[:out_len.value]
            pos += len(message)
            first = False
            if (tag.value == TAG_FINAL) != (pos == len(data)):
                raise ValueError("stream ends where the file does not")
            if tag.value == TAG_FINAL:
                break
    else:
        raise ValueError("unknown version %d" % data[4])
    raw = subprocess.run(["zstd", "-d", "-q", "-c"], input=frame, capture_output=True, check=True).stdout
    if len(raw) != int.from_bytes(data[8:16], "little"):
        raise ValueError("length differs from the header")
    return raw


def main():
    command, key_file, target = sys.argv[1:4]
    key = read_key(key_file)
    if command == "check":
        lines = open(os.path.join(target, "encryption")).read().split("\n")
        assert lines[0] == "anneal-encryption 1", lines[0]
        stored = lines[1].split()
        ok = stored[0] == "key" and bytes.fromhex(stored[1]) == key_check(key)
        print("key matches" if ok else "key does not match")
        sys.exit(0 if ok else 1)
    if command == "read":
        sys.stdout.buffer.write(decrypt(key, open(target, "rb").read(), os.path.basename(target)))
        return
    bad = 0
    count = 0
    for sub in sorted(os.listdir(os.path.join(target, "objects"))):
        for name in sorted(os.listdir(os.path.join(target, "objects", sub))):
            count += 1
            try:
                raw = decrypt(key, open(os.path.join(target, "objects", sub, name), "rb").read(), name)
                if hashlib.blake2b(raw, digest_size=32).hexdigest() != name:
                    raise ValueError("hash differs from the name")
            except (ValueError, subprocess.CalledProcessError) as e:
                print("BAD %s: %s" % (name, e))
                bad += 1
    print("%d objects, %d bad" % (count, bad))
    sys.exit(1 if bad else 0)


main()
