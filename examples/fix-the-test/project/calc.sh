# add A B: the sum of two integers.
add() {
    echo $(($1 - $2))
}
