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
  client.py load PORT PATH BODY_FILE THREADS REQUESTS [TOKEN]
      THREADS threads sending REQUESTS requests each, in turn; prints one
      line per answer: "STATUS VERSION", VERSION from the answer's
      Anneal-Model-Version header
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


def load(port, path, payload, threads, requests, token):
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = "Bearer " + token
    lines = []
    lock = threading.Lock()

    def worker():
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        for _ in range(requests):
            try:
                conn.request("POST", path, body=payload, headers=headers)
                response = conn.getresponse()
                response.read()
                line = f"{response.status} {response.getheader('Anneal-Model-Version')}"
            except (OSError, http.client.HTTPException) as e:
                line = f"ERROR {type(e).__name__}:{e}"
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
            with lock:
                lines.append(line)
        conn.close()

    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    print("\n".join(lines))


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
    elif command == "load":
        payload = open(argv[4], "rb").read()
        load(int(argv[2]), argv[3], payload, int(argv[5]), int(argv[6]), argv[7] if len(argv) > 7 else "")
    else:
        raise SystemExit("unknown command " + command)


if __name__ == "__main__":
    main(sys.argv)
