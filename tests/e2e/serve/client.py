#!/usr/bin/python3
"""A client of `anneal serve` for the e2e tests, on Python's http.client.

  client.py request PORT METHOD PATH [BODY_FILE] [HEADER: VALUE]...
      prints the status on the first line, then the body
  client.py body FORMAT CSV_FILE
      prints a request body for CSV_FILE's rows: FORMAT infer (named column
      tensors), tensor (one [N,F] FP32 tensor), split (MLflow
      dataframe_split) or records (MLflow dataframe_records)
  client.py as_csv FORMAT < ANSWER
      prints the answer (FORMAT infer or mlflow) as `anneal predict`'s CSV,
      numbers as the answer's text, unconverted
  client.py switch PORT PATH BODY_FILE THREADS READY_FIFO GO_FIFO
      THREADS threads sending requests without pause, each on its own
      connection. Once 50 are answered it writes "ready" to READY_FIFO and
      waits for a line on GO_FIFO (the test moves the alias meanwhile);
      each thread then sends 20 more. Prints one line per request: "PHASE
      STATUS VERSION", PHASE "after" for a request sent once GO_FIFO was
      read, else "before"; VERSION from the Anneal-Model-Version header.
  client.py https PORT CA_FILE PATH
      GET PATH over TLS, verifying the server against CA_FILE; prints the
      status, then the body
"""
import csv
import http.client
import json
import sys
import threading


def cell(text):
    """A CSV cell as JSON: a number where it reads as one, null when empty."""
    if text == "":
        return None
    try:
        value = float(text)
    except ValueError:
        return text
    if value != value or value in (float("inf"), float("-inf")):
        return text
    return int(text) if text.lstrip("-").isdigit() else value


def body(fmt, path):
    rows = list(csv.reader(open(path, newline="")))
    header, data = rows[0], rows[1:]
    values = [[cell(c) for c in row] for row in data]
    if fmt == "infer":
        inputs = []
        for j, name in enumerate(header):
            column = [row[j] for row in values]
            numeric = all(v is None or isinstance(v, (int, float)) for v in column)
            if not numeric:  # BYTES: the CSV's text, null where it is empty
                column = [row[j] if row[j] != "" else None for row in data]
            inputs.append({"name": name, "shape": [len(data)], "datatype": "FP32" if numeric else "BYTES",
                           "data": column})
        return {"id": "e2e", "inputs": inputs}
    if fmt == "tensor":
        return {"inputs": [{"name": "input", "shape": [len(data), len(header)], "datatype": "FP32",
                            "data": [v for row in values for v in row]}]}
    if fmt == "split":
        return {"dataframe_split": {"columns": header, "data": values}}
    if fmt == "records":
        return {"dataframe_records": [dict(zip(header, row)) for row in values]}
    raise SystemExit("unknown format " + fmt)


def csv_field(s):
    if any(c in s for c in ',"\n\r'):
        return '"' + s.replace('"', '""') + '"'
    return s


def as_csv(fmt, answer):
    # Numbers kept as the answer's text: the check is on bytes.
    j = json.loads(answer, parse_float=str, parse_int=str)
    lines = []
    if fmt == "infer":
        outputs = {o["name"]: o for o in j["outputs"]}
        names = j["parameters"].get("class_names")
        predictions = outputs["prediction"]["data"]
        if names is None:
            lines.append("row,prediction")
            lines += [f"{i + 1},{p}" for i, p in enumerate(predictions)]
        else:
            lines.append(",".join(["row", "prediction"] + [csv_field("p_" + n) for n in names]))
            probabilities = outputs["probabilities"]["data"]
            k = len(names)
            for i, p in enumerate(predictions):
                lines.append(",".join([str(i + 1), csv_field(p)] + probabilities[i * k:(i + 1) * k]))
    else:
        records = j["predictions"]
        keys = list(records[0].keys()) if records else ["prediction"]
        lines.append(",".join(["row"] + [csv_field(k) for k in keys]))
        for i, r in enumerate(records):
            # Numbers (text here) never need quoting; class names may.
            lines.append(",".join([str(i + 1)] + [csv_field(r[k]) for k in keys]))
    return "\n".join(lines) + "\n"


def request(port, method, path, payload=None, headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    conn.request(method, path, body=payload, headers=headers or {})
    response = conn.getresponse()
    data = response.read()
    conn.close()
    return response, data


def switch(port, path, payload, threads, ready_fifo, go_fifo):
    lines = []
    lock = threading.Lock()
    answered = [0]
    go = threading.Event()
    ready = threading.Event()

    def worker():
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        after = 0
        while after < 20:
            phase = "after" if go.is_set() else "before"
            try:
                conn.request("POST", path, body=payload, headers={"Content-Type": "application/json"})
                response = conn.getresponse()
                response.read()
                line = f"{phase} {response.status} {response.getheader('Anneal-Model-Version')}"
            except (OSError, http.client.HTTPException) as e:
                line = f"{phase} ERROR {type(e).__name__}:{e}"
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
            with lock:
                lines.append(line)
                answered[0] += 1
                if answered[0] >= 50:
                    ready.set()
            if phase == "after":
                after += 1
        conn.close()

    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for t in pool:
        t.start()
    ready.wait(300)
    with open(ready_fifo, "w") as f:
        f.write("ready\n")
    with open(go_fifo) as f:
        f.readline()
    go.set()
    for t in pool:
        t.join()
    print("\n".join(lines))


def https_get(port, ca, path):
    import ssl
    context = ssl.create_default_context(cafile=ca)
    conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=300, context=context)
    conn.request("GET", path)
    response = conn.getresponse()
    print(response.status)
    print(response.read().decode())


def main(argv):
    command = argv[1]
    if command == "request":
        port, method, path = int(argv[2]), argv[3], argv[4]
        payload, headers = None, {}
        for arg in argv[5:]:
            if ": " in arg:
                k, v = arg.split(": ", 1)
                headers[k] = v
            else:
                payload = open(arg, "rb").read()
        response, data = request(port, method, path, payload, headers)
        sys.stdout.write(f"{response.status}\n")
        sys.stdout.buffer.write(data)
    elif command == "body":
        json.dump(body(argv[2], argv[3]), sys.stdout)
    elif command == "as_csv":
        sys.stdout.write(as_csv(argv[2], sys.stdin.read()))
    elif command == "switch":
        payload = open(argv[4], "rb").read()
        switch(int(argv[2]), argv[3], payload, int(argv[5]), argv[6], argv[7])
    elif command == "https":
        https_get(int(argv[2]), argv[3], argv[4])
    else:
        raise SystemExit("unknown command " + command)


if __name__ == "__main__":
    main(sys.argv)
