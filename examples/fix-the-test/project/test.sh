. ./calc.sh
got=$(add 2 3)
if [ "$got" = 5 ]; then
    echo "ok: add 2 3 = 5"
else
    echo "FAIL: add 2 3 = $got, want 5"
    exit 1
fi
